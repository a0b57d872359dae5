#!/usr/bin/env python3
"""Doxygen INPUT_FILTER for Kiln's headers (docs/Doxyfile). A run of `///` lines indented two or more
spaces deeper than the comment's text, right after a line that ends with ':', is an example or a
table (`///   ddp.no_sync();`): it is shown as a code block instead of being flowed into the
paragraph. A Note's title line is shown as a title. The markers go at the ends of existing lines, so
line numbers stay the header's. Only what Doxygen reads changes, never the headers."""
import re
import sys

DOC = re.compile(r'^(\s*///)(?!<)(.*)$')
NOTE_TITLE = re.compile(r'^(\s*///)\s*(Note \[[^\]]+\])\s*$')


def filter_lines(lines):
    # A Note's title on its own line (`/// Note [Bucket views]`) is shown as a title, not run into
    # the text after it.
    out = [NOTE_TITLE.sub(r'\1 <b>\2</b><br>', l) for l in lines]
    lines = out[:]
    i = 0
    while i < len(lines):
        m = DOC.match(lines[i])
        if not m:
            i += 1
            continue
        text = m.group(2)
        if text.rstrip().endswith(':') and not re.match(r'\s*(-|\d+\.)\s', text):
            j = i + 1
            while j < len(lines):
                n = DOC.match(lines[j])
                if not n or not n.group(2).startswith('   ') or n.group(1) != m.group(1):
                    break
                j += 1
            if j > i + 1:
                out[i] = lines[i].rstrip() + ' \\code'
                out[j - 1] = lines[j - 1].rstrip() + ' \\endcode'
                i = j
                continue
        i += 1
    return out


def main():
    with open(sys.argv[1], encoding='utf-8') as f:
        lines = f.read().split('\n')
    sys.stdout.write('\n'.join(filter_lines(lines)))


if __name__ == '__main__':
    main()
