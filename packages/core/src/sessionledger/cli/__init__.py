"""The ``sessionledger`` command line: see, check and move stored sessions, and the demo.

``main(argv)`` lives in ``sessionledger.cli.__main__``; each command group has its own
module (``inspecting``, ``checking``, ``moving``, ``demo``). Nothing is imported here so
that ``python -m sessionledger.cli._demo_child`` starts fast.
"""
