#!/usr/bin/env python3
"""The size of dsh's code at a git revision: lines of C (broker/, components/),
Python and TypeScript, and the C functions' sizes (a definition runs from a
'{' in column 0 to the next '}' in column 0, as czmq's style writes them).

    python3 deploy/code_stats.py [REV]        (default HEAD)

Prints the totals, the mean function length and the functions of 80 lines
or more, longest first. What issue 27's figures were measured with."""
import statistics
import subprocess
import sys


def files(rev, prefixes, suffixes):
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True,
                           check=True).stdout.split()
    return [name for name in names if name.startswith(prefixes) and name.endswith(suffixes)]


def text(rev, name):
    return subprocess.run(["git", "show", "%s:%s" % (rev, name)], capture_output=True, text=True,
                          check=True).stdout.split("\n")


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    c_files = files(rev, ("broker/", "components/", "schemas/"), (".c", ".h"))
    sizes, big, c_lines = [], [], 0
    for name in c_files:
        lines = text(rev, name)
        c_lines += len(lines)
        start = None
        for index, line in enumerate(lines):
            if line == "{":
                start = index
            elif line.startswith("}") and not line.startswith("};") and start is not None:
                size = index - start + 1
                sizes.append(size)
                if size >= 80:
                    big.append((size, name, lines[start - 1].strip()[:60]))
                start = None
    py = sum(len(text(rev, name)) for name in files(rev, ("components/python/dsh/",), (".py",)))
    ts = sum(len(text(rev, name)) for name in files(rev, ("components/node/src/",), (".ts",)))
    print("%s: C %d lines in %d files, Python %d, TypeScript %d" % (rev, c_lines, len(c_files), py, ts))
    print("C functions: %d, mean %.1f lines, %d of 80 lines or more" % (len(sizes), statistics.mean(sizes), len(big)))
    for size, name, head in sorted(big, reverse=True):
        print("  %4d  %s  %s" % (size, name, head))


if __name__ == "__main__":
    main()
