// The check of a script that takes no arguments, made before it builds or starts anything (half a
// minute): `--help` (or `-h`) alone prints `usage` and exits 0; anything else is refused in one
// line, with the usage's first line, exit 2 (an argument it did not know would otherwise be
// ignored, and everything run regardless).
function takesNoArguments(usage, args = process.argv.slice(2)) {
  if (args.length === 1 && (args[0] === '--help' || args[0] === '-h')) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  if (args.length) {
    process.stderr.write(`unknown argument: ${args[0]}\n${usage.split('\n')[0]}\n`);
    process.exit(2);
  }
}

module.exports = { takesNoArguments };
