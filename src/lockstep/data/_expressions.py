"""Column expressions (Ray's ``ray.data.expressions``) as ``pyarrow.compute`` expressions.

``col("x") + lit(1)``, comparisons and ``&``/``|``/``~`` build a ``pyarrow.compute``
expression, evaluated on whole blocks by Arrow. A string such as ``"x > 50 and y != 'a'"``
(what Ray's ``filter(expr=...)`` takes) is parsed into the same kind of expression.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}
_COMPARE = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def col(name: str) -> Any:
    """The column ``name``, as an expression.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.expressions import col, lit
        >>> ld.range(3).with_column("y", col("id") * lit(10)).take_all()
        [{'id': 0, 'y': 0}, {'id': 1, 'y': 10}, {'id': 2, 'y': 20}]
    """
    import pyarrow.compute as pc

    if not isinstance(name, str):
        raise ValueError(f"col takes a column name, got {name!r}")
    return pc.field(name)


def lit(value: Any) -> Any:
    """A constant, as an expression.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.expressions import lit
        >>> ld.range(2).with_column("one", lit(1)).take_all()
        [{'id': 0, 'one': 1}, {'id': 1, 'one': 1}]
    """
    import pyarrow.compute as pc

    return pc.scalar(value)


def parse(text: str) -> Any:
    """The expression a string such as ``"x > 50 and y != 'a'"`` writes."""
    try:
        tree = ast.parse(text, mode="eval").body
        return _build(tree)
    except (SyntaxError, ValueError, KeyError) as exc:
        raise ValueError(
            f"filter: cannot read the expression {text!r} ({exc}). HINT: columns, constants, "
            "+ - * /, comparisons, and/or/not, e.g. \"x > 50 and label == 'cat'\""
        ) from exc


def _build(node: ast.AST) -> Any:
    import pyarrow.compute as pc

    if isinstance(node, ast.Name):
        return pc.field(node.id)
    if isinstance(node, ast.Constant):
        return pc.scalar(node.value)
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_build(node.left), _build(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.Invert):
        return ~_build(node.operand)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return pc.scalar(0) - _build(node.operand)
    if isinstance(node, ast.BoolOp):
        combine = operator.and_ if isinstance(node.op, ast.And) else operator.or_
        result = _build(node.values[0])
        for value in node.values[1:]:
            result = combine(result, _build(value))
        return result
    if isinstance(node, ast.Compare):
        return _compare(node)
    raise ValueError(f"{type(node).__name__} is not supported")


def _compare(node: ast.Compare) -> Any:
    result, left = None, _build(node.left)
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        if isinstance(op, ast.In | ast.NotIn) and isinstance(right_node, ast.List | ast.Tuple):
            values = [v.value for v in right_node.elts if isinstance(v, ast.Constant)]
            part = left.isin(values)
            part = ~part if isinstance(op, ast.NotIn) else part
            right = None
        else:
            right = _build(right_node)
            part = _COMPARE[type(op)](left, right)
        result = part if result is None else result & part
        left = right
    return result
