"""Tessera's decision core: the rules every app and the placement engine share, in one copy each.

Numpy and the standard library only (the import contract "core is Django-free" in ``.importlinter``); the
apps call into ``core``, never the other way round. See ``docs/architecture.md``, "The decision core".
"""
