"""The two exact subproblems of a slot for a fixed grouping: contiguous cut points of one
ordered group (min-max dynamic programs, `cuts`) and integer batch shares across groups
(`shares`, with a HiGHS LP and a Pyomo reference model); `cache.SlotCache` is the per-slot
cache their callers own and pass in."""
