"""Baseline plans (even DP, LB-BSP, GPipe, DAPPLE, PipeDream, HetPipe) and the cheapest
known plan, each a special case of our model scored with our cost model."""
from .reconstructions import (
                              ALL,
                              LABELS,
                              cheapest,
                              cost_weights,
                              dapple,
                              even_dp,
                              even_split,
                              gpipe,
                              hetpipe,
                              holders,
                              lb_bsp,
                              per_sample_time,
                              pipedream,
                              proportional_split,
                              virtual_workers,
)

__all__ = ["ALL", "LABELS", "cheapest", "cost_weights", "dapple", "even_dp", "even_split", "gpipe", "hetpipe",
           "holders", "lb_bsp", "per_sample_time", "pipedream", "proportional_split", "virtual_workers"]
