"""PNG plots of runs, single slots and comparisons (matplotlib is imported here only, never by
the core; it is the optional `plot` extra).

- run.py: batch time, costs and queues over a run's slots (`run.png`);
- devices.py: devices x slots map of the groups and stages held (`devices.png`);
- timeline.py: one slot's pipeline timeline from the event simulator (`dynpar solve --plot`);
- compare.py: batch time against budget use, one point per policy (`compare.png`), per
  instance for the benchmark report.
"""
from .compare import plot_compare, plot_compare_grid, plot_v_tradeoff
from .devices import device_map, plot_device_map
from .run import plot_run
from .timeline import plot_timeline, timeline

__all__ = ["device_map", "plot_compare", "plot_compare_grid", "plot_device_map", "plot_run",
           "plot_timeline", "plot_v_tradeoff", "timeline"]
