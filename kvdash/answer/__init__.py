"""The answer for one configuration: the engine-free core composed with one engine's rules (issue 26).

:mod:`kvdash.answer.calc` (``calculate``, ``CalcInput``), :mod:`kvdash.answer.budget` (``BudgetSpec``,
``resolve_budget``), :mod:`kvdash.answer.text` (assumption lines, the reserve basis, the summary).  This layer sits
above :mod:`kvdash.engines` and below the sources and faces."""
