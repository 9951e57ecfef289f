# SPDX-License-Identifier: Apache-2.0
"""Lengths of the functions defined at namespace scope in a C or C++ file,
for tests/layout/check_layout.py (no function over MAX_FUNCTION_LINES in the
product folders). A brace counter, not a parser: comments, strings and
preprocessor lines are blanked first, and a brace opens a function when the
statement before it has a parameter list and is not a type or an
initializer. Member functions defined inside a class body are not counted
(they are short by habit); lambdas count toward the function holding them."""
import re

_TYPE_HEAD = re.compile(r"^(struct|class|enum|union)\b")
_NAMESPACE_HEAD = re.compile(r'^(namespace\b|extern\s+"C")')


def _blank(src):
    """src with comments, string and character literals and preprocessor
    lines blanked, newlines kept (so line numbers stay)."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        raw = re.match(r'R"([^(\s]{0,16})\(', src[i:i + 20])
        if raw:
            end = ")" + raw.group(1) + '"'
            j = src.find(end, i)
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        c = src[i]
        if c in "\"'" and not (c == "'" and i > 0 and src[i - 1].isalnum()):  # 1'000 digit separators
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return ["" if line.lstrip().startswith("#") else line for line in "".join(out).split("\n")]


def function_lengths(text):
    """[(lines, first_line, signature)] of the namespace-scope functions in text."""
    found, stack, stmt = [], [], ""
    for number, line in enumerate(_blank(text), 1):
        for ch in line:
            if ch == "{":
                head = " ".join(stmt.split())
                at_scope = all(kind == "ns" for kind, _, _ in stack)
                if _NAMESPACE_HEAD.match(head):
                    kind = "ns"
                elif at_scope and "(" in head and not _TYPE_HEAD.match(head) and not head.endswith("="):
                    kind = "fn"
                else:
                    kind = "other"
                stack.append((kind, number, head))
                stmt = ""
            elif ch == "}":
                if stack:
                    kind, first, head = stack.pop()
                    if kind == "fn":
                        found.append((number - first + 1, first, head))
                stmt = ""
            elif ch == ";":
                stmt = ""
            else:
                stmt += ch
        stmt += " "
    return found
