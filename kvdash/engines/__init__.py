"""Engine rules, one module per engine behind :class:`kvdash.engines.base.EngineRules`; find one by name with
:func:`kvdash.engines.registry.get`."""
