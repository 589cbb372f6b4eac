"""Split ``assert a and b`` into ``assert a`` / ``assert b`` so a failure names its condition.

pytest's report of ``assert a and b`` shows the whole expression; split, the failing line is
the failing condition. The rewrite is exact: ``and`` evaluates left to right and stops at the
first false operand, and so do consecutive asserts; a message is repeated on each (it is
evaluated only on failure). Only asserts that are a whole statement on their own lines are
rewritten; an operand that spans lines is wrapped in parentheses; a comment on the assert's
last line stays on the last new line; asserts with comments inside are left alone. After
writing, each file's AST is compared with the original's AST rewritten the same way, so
nothing else can change.

    .venv/bin/python scripts/split_asserts.py FILE... [--check]
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path


def _segment(source: str, node: ast.expr) -> str:
    text = ast.get_source_segment(source, node, padded=False)
    if text is None:
        raise ValueError("no source for an operand")
    return f"({text})" if "\n" in text else text


def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _splittable(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Assert) and isinstance(node.test, ast.BoolOp)
            and isinstance(node.test.op, ast.And))


def rewrite(source: str) -> tuple[str, int]:
    """The source with every splittable assert split, and how many were split."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    comments = _comments(source)
    edits: list[tuple[int, int, list[str]]] = []
    for node in ast.walk(tree):
        if not _splittable(node):
            continue
        assert isinstance(node, ast.Assert) and isinstance(node.test, ast.BoolOp)
        first, last = node.lineno, node.end_lineno or node.lineno
        head, tail = lines[first - 1], lines[last - 1]
        indent = head[:node.col_offset]
        rest = tail[node.end_col_offset:].strip()
        inner = [n for n in range(first, last) if n in comments]
        if indent.strip() or (rest and not rest.startswith("#")) or inner:
            continue
        msg = f", {_segment(source, node.msg)}" if node.msg is not None else ""
        new = [f"{indent}assert {_segment(source, value)}{msg}" for value in node.test.values]
        if rest:
            new[-1] += f"  {rest}"
        edits.append((first, last, [line + "\n" for line in new]))
    for first, last, new in sorted(edits, reverse=True):
        lines[first - 1:last] = new
    return "".join(lines), len(edits)


class _Split(ast.NodeTransformer):
    """The same rewrite on the AST, for the check."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                out: list[ast.stmt] = []
                for stmt in value:
                    self.visit(stmt)
                    if _splittable(stmt):
                        assert isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.BoolOp)
                        out += [ast.Assert(test=v, msg=stmt.msg) for v in stmt.test.values]
                    else:
                        out.append(stmt)
                setattr(node, field, out)
            elif isinstance(value, ast.AST):
                self.visit(value)
        return node


def same_but_split(old: str, new: str) -> bool:
    """Whether ``new`` parses to ``old`` with some of its splittable asserts split."""
    want = ast.dump(_Split().visit(ast.parse(old)))
    got = ast.dump(_Split().visit(ast.parse(new)))  # asserts left alone get split here too
    return want == got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="only count, write nothing")
    args = parser.parse_args()
    total = 0
    for path in args.files:
        old = path.read_text()
        new, count = rewrite(old)
        if not count:
            continue
        if not same_but_split(old, new):
            print(f"{path}: rewrite changed more than the asserts; left alone", file=sys.stderr)
            continue
        total += count
        if not args.check:
            path.write_text(new)
        print(f"{path}: {count}")
    print(f"{total} asserts split")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
