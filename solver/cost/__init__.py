"""The cost model: pipeline time of a group, gradient sync, per-iteration costs, evaluation of
a plan, migration between plans and the event simulator that checks the closed forms
(DESIGN.md section 3). Every cost is linear in the batch time T and the shares:
c_k = R_k T + sum_g e_kg b_g + F_k.
"""
from .costs import CostCoeffs, budget_weights, cost_coeffs
from .evaluate import Evaluation, evaluate, lower_bound_time
from .pipeline import GroupCoeffs, gpipe_coeffs, group_coeffs, stage_times
from .sync import sync_time

__all__ = ["CostCoeffs", "Evaluation", "GroupCoeffs", "budget_weights", "cost_coeffs", "evaluate",
           "gpipe_coeffs", "group_coeffs", "lower_bound_time", "stage_times", "sync_time"]
