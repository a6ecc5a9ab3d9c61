"""Which of cosmic-ray's operators a mutation run uses, as data.

cosmic-ray's full cross product of binary and comparison operators is mostly noise (``+``
made ``<<``); the selection keeps the mutants a real bug resembles: negated conditions,
swapped ``and``/``or``, flipped comparisons, numbers and booleans changed, loops and
decorators removed, exception types changed.
"""

from __future__ import annotations

import re

# Full-match regular expressions over cosmic-ray's operator names (without "core/").
SELECTED_OPERATORS: tuple[str, ...] = (
    r"AddNot",
    r"ReplaceUnaryOperator_Delete_Not",
    r"ReplaceAndWithOr",
    r"ReplaceOrWithAnd",
    r"ReplaceTrueWithFalse",
    r"ReplaceFalseWithTrue",
    r"NumberReplacer",
    r"ZeroIterationForLoop",
    r"RemoveDecorator",
    r"ExceptionReplacer",
    r"ReplaceBreakWithContinue",
    r"ReplaceContinueWithBreak",
    # A comparison replaced by its negation or its strict/non-strict twin.
    r"ReplaceComparisonOperator_(Eq_NotEq|NotEq_Eq|Is_IsNot|IsNot_Is)",
    r"ReplaceComparisonOperator_(Lt_GtE|GtE_Lt|Gt_LtE|LtE_Gt|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt)",
    r"ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul)",
)

_SELECTED = re.compile("|".join(f"(?:{p})" for p in SELECTED_OPERATORS))


def selected(operator_name: str) -> bool:
    """True when the operator (``core/Name`` or ``Name``) is in the selection."""
    return _SELECTED.fullmatch(operator_name.rsplit("/", 1)[-1]) is not None
