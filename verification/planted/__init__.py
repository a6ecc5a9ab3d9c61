"""Targets with planted bugs, shipped with the package so that ``certify`` measures its
sensitivity from any install; the tests prove each checker catches them."""
