"""Mutants generated mechanically from the source: not a list tuned to the tests.

:func:`generate` walks each target module's syntax tree and yields one :class:`GeneratedMutant` per
candidate of these families:

- ``compare``: ``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``in``/``not in``, ``is``/``is not`` swapped;
- ``boolean``: ``and``/``or`` swapped; ``not`` dropped;
- ``off-by-one``: an integer constant one more and one less, a slice bound plus and minus one;
- ``condition``: an ``if`` test (statement, expression or comprehension filter) replaced by ``True`` and by
  ``False``; one operand of an ``and``/``or`` dropped;
- ``min-max``: ``min`` and ``max`` swapped.

Each is one edit of the source, located by line and column, with a stable id (the module, the enclosing
function, the kind of change and its rank among the same kind there), that compiles to a different
bytecode than the original (the ones that would not are skipped). Docstrings, type annotations, logging
calls, messages (f-strings, ``format``, ``raise``'s arguments) and ``__repr__``-like methods are not mutated.

``TARGETS`` is the one declaration of what is mutated and which tests judge it beyond the model test.
"""

from __future__ import annotations
import __future__

import ast
import bisect
import io
import itertools
import random
import tokenize
import types
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """Mutated modules or package folders and the test files that judge them after the model test."""

    name: str
    paths: tuple[str, ...]
    deterministic: tuple[str, ...]
    integration: tuple[str, ...]


PROTOCOL_TESTS = ("tests/unit/test_protocol.py", "tests/integration/test_table_changes.py",
                  "tests/integration/test_committer.py")
KEYED_UNIT_TESTS = ("tests/unit/test_changes.py", "tests/unit/test_key_index.py", "tests/unit/test_position_deletes.py")
UPKEEP_UNIT_TESTS = ("tests/unit/test_upkeep_plan.py", "tests/unit/test_upkeep_manifests.py",
                     "tests/unit/test_upkeep_lineage.py")

# What is mutated (a file or a package folder) and which tests judge it: the deterministic ones need no Spark.
TARGETS = (
    Target("protocol", ("icebergsync/protocol.py",), PROTOCOL_TESTS, ()),
    Target("committer", tuple(f"spark_app/commit/{name}.py" for name in (
        "swap", "sink", "fence", "data_commit", "head_writes", "dead_letters", "maintenance_commits", "expiry",
        "cleanup", "references", "trigger_output", "committer")), PROTOCOL_TESTS,
           ("tests/integration/test_multi_table_commit.py", "tests/integration/test_transient_faults.py")),
    Target("key_index", ("spark_app/commit/key_index/", "spark_app/iceberg/bloom_filter.py",
                         "spark_app/iceberg/parquet_hash.py"), KEYED_UNIT_TESTS,
           ("tests/integration/test_key_index.py", "tests/integration/test_keyed_commit.py")),
    Target("position_deletes", ("spark_app/iceberg/position_deletes/", "spark_app/commit/copy_on_write.py"),
           KEYED_UNIT_TESTS,
           ("tests/integration/test_position_deletes.py", "tests/integration/test_copy_on_write.py",
            "tests/integration/test_third_reader.py")),
    Target("upkeep", ("spark_app/upkeep/plan.py", "spark_app/upkeep/manifests.py", "spark_app/upkeep/rewrite.py",
                      "spark_app/iceberg/applied_deletes.py", "spark_app/staging/lineage.py",
                      "spark_app/staging/rewrite_rows.py"), UPKEEP_UNIT_TESTS,
           ("tests/integration/test_upkeep.py", "tests/integration/test_manifest_rewrite.py",
            "tests/integration/test_refs_through_upkeep.py")),
    Target("maintenance", ("spark_app/upkeep/runner.py",), UPKEEP_UNIT_TESTS,
           ("tests/integration/test_maintenance.py", "tests/integration/test_refs_through_upkeep.py")),
    Target("carry", ("spark_app/commit/carry/",), ("tests/unit/test_changes.py",),
           ("tests/integration/test_toast_carry.py",)),
    Target("schema_drift", ("spark_app/decoding/schema_drift/", "spark_app/commit/schema_changes.py"),
           ("tests/unit/test_schema_drift.py",),
           ("tests/integration/test_schema_evolution.py",)),
    Target("cut", ("spark_app/iceberg/cut.py",), ("tests/unit/test_rest_cut_answers.py",),
           ("tests/integration/test_atomic_cut.py", "tests/integration/test_many_tables_cuts.py")),
)

COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
LOGGING_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "format"}
PRESENTATION_METHODS = {"__repr__", "__str__", "__format__", "__rich_repr__"}


@dataclass(frozen=True)
class GeneratedMutant:
    """One edit of one file: the text between (line, column) and (end line, end column) becomes ``replacement``.

    Lines count from 1, columns from 0, in characters.
    """

    id: str
    module: str
    path: str
    family: str
    line: int
    column: int
    end_line: int
    end_column: int
    original: str
    replacement: str

    @property
    def name(self) -> str:
        """The id (the runner names mutants by ``name``)."""
        return self.id

    @property
    def what(self) -> str:
        """One line for the reports: where, and what became what."""
        return f"{self.path}:{self.line}:{self.column + 1} `{one_line(self.original)}` -> `{one_line(self.replacement)}`"

    def mutate(self, source: str) -> str:
        """``source`` with the edit made; ValueError when the located text is not the original."""
        lines = source.splitlines(keepends=True)
        start = sum(len(line) for line in lines[: self.line - 1]) + self.column
        end = sum(len(line) for line in lines[: self.end_line - 1]) + self.end_column
        if source[start:end] != self.original:
            raise ValueError(f"{self.id}: {self.path}:{self.line}:{self.column + 1} no longer holds {self.original!r}")
        return source[:start] + self.replacement + source[end:]

    def plant(self, root: Path) -> None:
        """Make the edit in the copy of the source tree at ``root``."""
        target = root / self.path
        target.write_text(self.mutate(target.read_text()))


def one_line(text: str) -> str:
    """``text`` with its runs of whitespace (line breaks included) made single spaces."""
    return " ".join(text.split())


@dataclass(frozen=True)
class Edit:
    """A candidate before it is checked: character offsets into the source, and the new text."""

    family: str
    kind: str
    start: int
    end: int
    replacement: str


class Positions:
    """Character offsets of a source's (line, byte column) positions, as the syntax tree gives them."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, byte_column: int) -> int:
        """The character offset of a node's line and UTF-8 byte column."""
        text = self.lines[line - 1].encode()[:byte_column].decode()
        return self.starts[line - 1] + len(text)

    def span(self, node: ast.AST) -> tuple[int, int]:
        """The character offsets where ``node`` starts and ends."""
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def line_column(self, offset: int) -> tuple[int, int]:
        """The line (from 1) and character column (from 0) of a character offset."""
        line = min(bisect.bisect_right(self.starts, offset) - 1, len(self.lines) - 1)
        return line + 1, offset - self.starts[line]


def operator_tokens(source: str, positions: Positions) -> list[tuple[int, int, str]]:
    """Every operator and keyword token of ``source``: start and end offsets and text, in order."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.OP, tokenize.NAME):
            start = positions.starts[token.start[0] - 1] + token.start[1]
            end = positions.starts[token.end[0] - 1] + token.end[1]
            found.append((start, end, token.string))
    return found


def tokens_between(tokens: Sequence[tuple[int, int, str]], start: int, end: int) -> list[tuple[int, int, str]]:
    """The tokens in ``[start, end)`` other than brackets."""
    return [t for t in tokens if start <= t[0] and t[1] <= end and t[2] not in "()"]


def is_excluded(node: ast.AST) -> bool:
    """Whether mutating under ``node`` cannot change behaviour or is not wanted: messages, logging, annotations."""
    if isinstance(node, ast.JoinedStr | ast.Raise | ast.Assert):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return True
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in PRESENTATION_METHODS:
        return True
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in LOGGING_METHODS:
            return True
        if isinstance(func, ast.Name) and func.id == "print":
            return True
    if isinstance(node, ast.If):
        test = ast.unparse(node.test)
        return test in ("TYPE_CHECKING", "typing.TYPE_CHECKING", "__name__ == '__main__'")
    return False


class Walker:
    """Collects the candidate edits of one module, with the qualified name of the code each sits in."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.positions = Positions(source)
        self.tokens = operator_tokens(source, self.positions)
        self.found: list[tuple[str, Edit]] = []

    def walk(self, node: ast.AST, scope: str) -> None:
        """Visit ``node`` and its children, skipping excluded subtrees and annotations."""
        if is_excluded(node):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            scope = f"{scope}.{node.name}" if scope else node.name
        for edit in self.edits(node):
            self.found.append((scope or "<module>", edit))
        for field, value in ast.iter_fields(node):
            if field in ("annotation", "returns", "type_comment", "decorator_list"):
                continue
            children = value if isinstance(value, list) else [value]
            for child in children:
                if isinstance(child, ast.AST):
                    self.walk(child, scope)

    def edits(self, node: ast.AST) -> Iterator[Edit]:
        """The candidate edits rooted at ``node`` itself."""
        if isinstance(node, ast.Compare):
            yield from self.compare_edits(node)
        elif isinstance(node, ast.BoolOp):
            yield from self.boolean_edits(node)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            start, end = self.positions.span(node)
            yield Edit("boolean", "not-dropped", start, end, self.operand_text(node.operand))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            start, end = self.positions.span(node)
            yield Edit("off-by-one", "int+1", start, end, str(node.value + 1))
            yield Edit("off-by-one", "int-1", start, end, str(node.value - 1))
        elif isinstance(node, ast.Slice):
            for bound in (node.lower, node.upper):
                if bound is not None and not isinstance(bound, ast.Constant):
                    start, end = self.positions.span(bound)
                    text = self.source[start:end]
                    atomic = isinstance(bound, ast.Name | ast.Attribute | ast.Call | ast.Subscript)
                    wrapped = text if atomic else f"({text})"
                    yield Edit("off-by-one", "slice+1", start, end, f"{wrapped} + 1")
                    yield Edit("off-by-one", "slice-1", start, end, f"{wrapped} - 1")
        elif isinstance(node, ast.If | ast.IfExp):
            start, end = self.positions.span(node.test)
            yield Edit("condition", "if-True", start, end, "True")
            yield Edit("condition", "if-False", start, end, "False")
        elif isinstance(node, ast.comprehension):
            for condition in node.ifs:
                start, end = self.positions.span(condition)
                yield Edit("condition", "filter-True", start, end, "True")
                yield Edit("condition", "filter-False", start, end, "False")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            start, end = self.positions.span(node.func)
            yield Edit("min-max", f"{node.func.id}-swapped", start, end, "max" if node.func.id == "min" else "min")

    def compare_edits(self, node: ast.Compare) -> Iterator[Edit]:
        """Each comparison operator of ``node`` swapped for its neighbour."""
        operands = [node.left, *node.comparators]
        for index, op in enumerate(node.ops):
            _, left_end = self.positions.span(operands[index])
            right_start, _ = self.positions.span(operands[index + 1])
            between = tokens_between(self.tokens, left_end, right_start)
            if not between:
                continue
            swapped = COMPARE_SWAPS[type(op)]
            kind = f"{COMPARE_TEXT[type(op)]}/{COMPARE_TEXT[swapped]}".replace(" ", "-")
            yield Edit("compare", kind, between[0][0], between[-1][1], COMPARE_TEXT[swapped])

    def boolean_edits(self, node: ast.BoolOp) -> Iterator[Edit]:
        """Each ``and``/``or`` of ``node`` swapped; each operand dropped."""
        word, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        spans = [self.positions.span(value) for value in node.values]
        for (_, left_end), (right_start, _) in itertools.pairwise(spans):
            keyword = [t for t in tokens_between(self.tokens, left_end, right_start) if t[2] == word]
            if keyword:
                yield Edit("boolean", f"{word}/{other}", keyword[0][0], keyword[0][1], other)
        start, end = self.positions.span(node)
        operands = [self.operand_text(value) for value in node.values]
        for index in range(len(operands)):
            kept = f" {word} ".join(operands[:index] + operands[index + 1:])
            yield Edit("condition", f"{word}-operand-dropped", start, end, kept)

    def operand_text(self, node: ast.expr) -> str:
        """The source of ``node``, in brackets when it binds looser than a comparison."""
        start, end = self.positions.span(node)
        text = self.source[start:end]
        return f"({text})" if isinstance(node, ast.BoolOp | ast.IfExp | ast.Lambda | ast.NamedExpr) else text


def code_shape(code: types.CodeType) -> tuple[object, ...]:
    """What a code object executes, without its line and column table (which any edit of lengths moves)."""
    consts = tuple(code_shape(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)


def compiled_shape(source: str, path: str) -> tuple[object, ...] | None:
    """The :func:`code_shape` of ``source`` compiled as module code; ``None`` when it does not compile."""
    try:
        return code_shape(compile(source, path, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True))
    except SyntaxError:
        return None


def statement_spans(tree: ast.Module, positions: Positions) -> list[tuple[int, int]]:
    """The character spans of a module's top-level statements, decorators included, in order."""
    spans = []
    for statement in tree.body:
        decorators = getattr(statement, "decorator_list", [])
        first_line = min([statement.lineno, *(d.lineno for d in decorators)])
        spans.append((positions.starts[first_line - 1], positions.span(statement)[1]))
    return spans


def mutants_of(path: str, module: str, source: str) -> list[GeneratedMutant]:
    """The generated mutants of one module's ``source`` (``path`` relative to the repository).

    A mutant's compilation and bytecode are checked on the top-level statement it edits (the unit of
    compilation), which keeps generating all of them fast.
    """
    tree = ast.parse(source)
    walker = Walker(source)
    walker.walk(tree, "")
    statements = statement_spans(tree, walker.positions)
    starts = [start for start, _ in statements]
    ranks: dict[tuple[str, str], int] = defaultdict(int)
    mutants = []
    for scope, edit in walker.found:
        rank = ranks[(scope, edit.kind)]
        ranks[(scope, edit.kind)] += 1
        start, end = statements[bisect.bisect_right(starts, edit.start) - 1]
        statement = source[start:end]
        mutated = source[start: edit.start] + edit.replacement + source[edit.end:end]
        shape = compiled_shape(mutated, path)
        if shape is None or shape == compiled_shape(statement, path):
            continue
        line, column = walker.positions.line_column(edit.start)
        end_line, end_column = walker.positions.line_column(edit.end)
        mutants.append(GeneratedMutant(
            id=f"{module}:{scope}:{edit.kind}#{rank}", module=module, path=path, family=edit.family,
            line=line, column=column, end_line=end_line, end_column=end_column,
            original=source[edit.start:edit.end], replacement=edit.replacement))
    return mutants


def target_files(target: Target, root: Path) -> list[str]:
    """The Python files of ``target`` under ``root``, relative to it, sorted."""
    files = []
    for path in target.paths:
        location = root / path
        files.extend(sorted(location.rglob("*.py")) if location.is_dir() else [location])
    return [str(f.relative_to(root)) for f in files]


def module_name(path: str) -> str:
    """A file's dotted module name."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def generate(root: Path, targets: Sequence[Target] = TARGETS) -> list[GeneratedMutant]:
    """Every generated mutant of ``targets`` in the source tree at ``root``, in file and source order."""
    return [mutant for target in targets for path in target_files(target, root)
            for mutant in mutants_of(path, module_name(path), (root / path).read_text())]


def target_of(mutant: GeneratedMutant, targets: Sequence[Target] = TARGETS) -> Target:
    """The target whose files hold ``mutant``."""
    for target in targets:
        if any(mutant.path == path or (path.endswith("/") and mutant.path.startswith(path)) for path in target.paths):
            return target
    raise LookupError(f"{mutant.path} is in no target")


def sample(mutants: Sequence[GeneratedMutant], count: int, seed: int) -> list[GeneratedMutant]:
    """``count`` mutants drawn with ``seed``, spread over the targets in turn (each target's shuffled by the seed)."""
    by_target: dict[str, list[GeneratedMutant]] = defaultdict(list)
    for mutant in mutants:
        by_target[target_of(mutant).name].append(mutant)
    draw = random.Random(seed)
    queues = []
    for name in sorted(by_target):
        queue = sorted(by_target[name], key=lambda m: m.id)
        draw.shuffle(queue)
        queues.append(queue)
    chosen: list[GeneratedMutant] = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop(0))
    return chosen
