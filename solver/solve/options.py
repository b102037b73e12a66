"""Options and result of the per-slot solver."""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field, fields, replace

from ..cost.evaluate import Evaluation
from ..model.plan import Plan
from ..status import Status
from ..subproblems.cuts import RELAX
from .inputs import QUEUE_MAX

CAP_WEIGHT_MAX = 1e3 * QUEUE_MAX
"""Largest SolveOptions.cap_weight (objective units per budget's worth): the budget tracker's
1e3 (online.tracking.CAP_WEIGHT) times the largest queue or V T it scales, with the same room
below overflow (solve.inputs)."""


_AT_LEAST_ONE = frozenset({"max_depth", "max_depth_many", "local_starts", "oracle_frontier", "class_max",
                           "class_min_size", "class_exact"})
"""SearchTuning's counts for which 0 leaves nothing to search (no group depth, no start, no cut set,
no device class or combination)."""
_ABOVE_ZERO = frozenset({"cut_work_pairs", "tp_explore", "size_explore"})
"""SearchTuning's numbers that must be > 0: a divisor (cut_work_pairs) and the fractions of the work
budget a screen gets."""


def _check_amount(name: str, x: object, positive: bool) -> None:
    """TypeError unless x is a real number (not bool); ValueError unless finite and >= 0 (> 0
    with `positive`)."""
    expected = f"{name}: expected a finite number {'>' if positive else '>='} 0"
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{expected}, got {x!r} ({type(x).__name__})")
    if not (math.isfinite(x) and (x > 0 if positive else x >= 0)):
        raise ValueError(f"{expected}, got {x!r}")


@dataclass(frozen=True)
class SearchTuning:
    """The search's tuning numbers. Each trades solve time against plan quality; the defaults
    were set on the quality and speed benchmarks (benchmarks/bench_quality.py, bench_speed.py)
    and every plan depends on them, so change them only with those figures at hand.
    "Small slot": at most `small_devices` available devices and `small_layers` layers."""

    small_devices: int = 6
    """Devices (available) up to which a slot is small: the oracle's range, where every group
    order is affordable and the search should match the oracle."""
    small_layers: int = 24
    """Layers up to which a slot can be small: the cut DPs cost O(k L^2) per order, so trying
    every order is cheap only for shallow models."""
    work_small: int = 5000
    """Work units (one unit ~ scoring one structure) of a small slot: more than the whole search
    needs there (a few hundred units), so small slots are never cut short."""
    work_medium: int = 800
    """Work units up to `medium_devices` devices: 7-8 devices have few groupings; the budget
    bounds the local search, which grows fastest with the devices (at 400, 81% of bench_budget's
    n = 8 slots came within 1% of the best plan known; at 800, all 15)."""
    medium_devices: int = 8
    """Devices up to which `work_medium` applies."""
    final_relocate: bool = True
    """The last polish (of the best plan, after the last local search) also tries every
    single-device relocation in the order of each group of up to orders.RELOCATE_UP_TO devices,
    as small slots' polishes do. On bench_budget's seeds 650000+ (64 slots of 8-64 devices) 3
    plans better (by 18% at n = 64, PipeDream ResNet-50 at 0.35 of its memory; 0.2% and 0.7%),
    none worse; on seeds 620000+ n = 16 within 1% of the best plan known on 79% from 74%;
    2-9% more solve time (bench_speed's cases)."""
    final_ordered_devices: int = 16
    """Devices up to which the last local search (from the best plan, before the last polish)
    also tries the order-keeping moves at its local optima (local.ordered_neighbours: a device
    inserted, removed or put in place of another where it stands in its group's order, not
    re-chained), as the small slots' local searches all do. A pipeline's device order sets its
    stage times and links, and the chain order a set is re-cut in may be far from its best
    (bench_budget slot 620024, SqueezeNet on 8 devices: one set 24% apart in two orders). On
    bench_budget's slots with n = 8 and 16, 40 each (seeds 630000+, fresh when this was set),
    the default came within 1% of the best plan known (the best of every setting and work
    budget tried) on 91.7% of them, from 83.3% (max gap 3.2% from 10.6%). Doing it at every
    local search's optima gave 94.4%, at 1.5-2.6x the solve time."""
    work_large: int = 1500
    """Work units up to `large_devices` devices."""
    large_devices: int = 16
    """Devices up to which `work_large` applies."""
    work_huge: int = 4000
    """Work units beyond `large_devices` devices (large pools: bounded solve time)."""
    cut_work_call: float = 0.35
    """Work units of one cut DP call of a group of two or more devices, besides its pairs
    (below). Measured on bench_budget's slots (seeds 52000+ and 53000+, n = 8-64, L = 16-177,
    12447 calls in the searches): a call takes 63 us + 1.9 us per stage + 2.9 ns per (stage,
    start, end) triple, and scoring a structure (the unit) 131 us median, 295 us mean, so a
    call of a few stages over L <= 60 costs a third of a unit."""
    cut_work_pairs: float = 70_000.0
    """(stage, start, end) triples of a cut DP worth one work unit (k (L - k + 1)^2 of a
    k-device group; from the same fit: 70000 x 2.9 ns = 0.2 ms, one mean score): deep models
    spend the budget faster."""
    polish_floor: float = 0.2
    """Work budgets the polish of the best structures (and the last local search) may spend
    however much the search spent before them: the polish is cheap (100-200 units) and where
    the local search used up the budget it was skipped, though it found the better plan of
    16 budgets on bench_budget slots (n = 64, 4.6%). With it, 96.7% of 61 slots (seeds 52000+
    and 53000+) came within 1% of the best plan known, from 93.4%; on seeds 57000+, 93.1%
    from 82.8%."""
    final_floor: float = 1.0
    """Work budgets the last local search and, again, the last polish (with relocations) may
    each spend however much the search spent before them (screens: 0, `screening`). With
    polish_floor alone shared by the top polishes and both final steps, the last polish got
    no work where the last local search used it up, and the last local search (order-keeping
    moves at n <= 16: about 140 neighbours, 1300 units, for a 9-device group) stopped before
    its first improvement: bench_budget seeds 790000+ slots 1 and 21 and 820000+ slot 17
    (n = 16; BERT-base at 0.35, VGG-16 at 0.7 of the memory level) were 7.6%, 9.6% and 8.7%
    above the 16x search. 0.5 brings those three within 1% (0.4 misses 820000+ slot 17), 1.0
    also 840000+ slot 17 (PipeDream SqueezeNet on 16 devices at 0.35, 2.3% at 0.5 and 0.75).
    bench_speed's slots and the fingerprint's answers are unchanged by it (their final steps
    finish under the budget); on Sailor's 32 GPUs (device level) the floors in every
    micro-batch size's screen cost 0.72 -> 0.95 CPU s for the same plan, hence none in
    screens."""
    patience: float = 2.0
    """A search past its work budget goes on while its tries are below `patience` times the
    tries at its last improvement (Scorer.exhausted; 1: stop at the budget). On bench_budget's
    slots (seeds 52000+ and 53000+, 61 feasible) the share within 1% of the best plan known
    went from 79% to 90% at the same budgets and median time; slots that stopped improving
    early stop at the budget as before."""
    extend_cap: float = 4.0
    """Most work of a search still improving, in budgets (so its solve time is bounded; 4 and
    8 gave the same plans on those slots). Screening searches (TP trials, micro-batch sizes:
    `screening`) do not extend."""
    min_structures: int = 150
    """Structures a search scores before its work budget can stop it (Scorer.exhausted; at most
    extend_cap budgets). Deep, memory-bound slots spend tens of work units of relief DPs per
    structure, so the budget ran out after a few dozen, before the local search's first
    improving moves (bench_budget seeds 96000+: 94.5% -> 98.2% of 55 slots within 1% of 16x;
    PipeDream ResNet-18 on 8 devices 19% -> 0%). Slots that score this many within their
    budget, as every bench_speed slot but two 354-layer ones does, are unchanged."""
    improve_rel: float = 1e-3
    """Relative objective improvement that counts for `patience`."""
    all_orders_small: int = 5
    """Small slots: every order of groups of up to this many devices is tried (5! = 120 orders)
    when re-cutting for memory and in the polish. At 4, a 5-stage pipeline of an outside
    audit's slot ended 7.2% above the oracle (its order untried); on 262 fresh small slots 5
    puts 257 within 1% of the oracle against 256, in the same median time (seeds 5570000+,
    5580000+; the fingerprint's and bench_quality's recorded answers the same)."""
    all_orders_deep_small: int = 3
    """Slots of up to `small_devices` devices but more than `small_layers` layers, re-cutting for
    memory: every order of groups of up to this many devices (3! = 6 cut DPs per variant). The
    current, speed, memory and reversed orders missed bench_quality seed 81000 slot 25's
    (SqueezeNet on five devices at 0.7 memory: a 1F1B pipeline with the most memory first, then
    the slower of the other two; 2.5% above the oracle)."""
    all_orders_memory: int = 0
    """Other slots, re-cutting for memory: every order only up to this many devices (0: the
    current, speed, memory, reversed orders and adjacent swaps only)."""
    relief_transpose_work: float = 1.0
    """Re-cutting for memory (Scorer.relieve_memory, relieve_by_variant_cuts), groups beyond the
    every-order sizes also try each adjacent swap of their order only where one of their cut
    DPs costs at most this many work units (Scorer.cut_work; one unit ~ one scored structure);
    the others try the current, speed, memory and reversed orders there, and the polish still
    tries the swaps of the best plans. A k-device group's swaps cost k - 1 cut DPs per variant:
    on 16 devices with a 177-layer model, the reliefs of the single pipelines alone spent the
    whole work budget before any local search (bench_budget, seeds 57000+: PipeDream's ResNet-50
    at 0.7 memory was 15.3% off the 16x search, now 0%)."""
    alpha_orders_up_to: int = 5
    """Small slots' local search: a group of up to this many devices is also scored in the order
    of least per-sample bottleneck (Scorer.alpha_order) where that is not its fast-link chain;
    every order is compared where their cut DPs cost at most `alpha_order_work`, else the
    chain's relocations. With layers of unequal weight (an embedding first, a vocabulary head
    last) the chain can leave the heavy layer on a slow stage: fuzzed slot 800108, GPT-2 on
    four A100s and a V100, one 5-stage pipeline 2.9% faster than the search's two groups, in
    an order that starts at the V100."""
    alpha_order_work: float = 60.0
    """Work units (Scorer.cut_work, summed over the orders) of one group's every-order alpha
    order; 120 orders of 5 devices over 26 layers cost 46."""
    all_orders_polish: int = 2
    """Other slots, polish: every order of groups up to this many devices."""
    max_depth: int = 16
    """Most devices in one group (pipeline stages) when at most `many_devices` are available."""
    max_depth_many: int = 8
    """Most devices in one group beyond `many_devices` devices: deeper pipelines rarely pay
    with that many devices and their neighbourhoods are the largest."""
    many_devices: int = 16
    """Devices beyond which `max_depth_many` applies."""
    levels_all: int = 16
    """Pipeline depths and data-parallel widths of the families: every size 1..n up to this
    many, powers of two and n beyond (as DAPPLE's planner does)."""
    chunk_levels_all: int = 12
    """Group sizes of the chain-chunk and speed-balanced families: every size up to this many,
    powers of two and n beyond."""
    cluster_thresholds: int = 4
    """Link-bandwidth thresholds of the cluster family (the fastest distinct ones): one
    grouping per threshold."""
    busy_recut_share: float = 0.3
    """Slots of up to `small_devices` devices: where busy joules make at least this part of the
    incumbent's objective, every group score_groups builds is also re-cut for less busy energy
    (Scorer.busy_recut; the polish re-cuts the best plans so in every slot)."""
    busy_relax: tuple[float, ...] = (1.15, 1.7)
    """Factors on the min-alpha thresholds under which Scorer.busy_cuts seeks least-energy cut
    sets (besides the least-energy cut set under no threshold)."""
    local_starts: int = 3
    """Distinct best structures the local search starts from."""
    local_max_iter: int = 30
    """Most improving moves of one local search."""
    final_local_max_iter: int = 5
    """Most improving moves of the last local search after the polish."""
    polish_top_small: int = 5
    """Best structures polished in small slots."""
    polish_top: int = 2
    """Best structures polished in other slots."""
    polish_rounds: int = 3
    """Coordinate-descent rounds of the polish (each over every group; stops early when a
    round improves nothing)."""
    frontier_relax: tuple[float, ...] = RELAX
    """Factors on the min-alpha thresholds (X, Y) under which the frontier cut sets are sought
    with min-sum DPs (subproblems.cuts.frontier_cuts): from tight to loose, a spread of
    fill-and-drain trade-offs."""
    frontier_seeds: int = 2
    """Best (X, Y) points of the min-alpha frontier relaxed by `frontier_relax`."""
    oracle_frontier: int = 8
    """Frontier cut sets per ordered group (per memory level) when the oracle works on frontier
    cuts."""
    oracle_all_cuts_limit: int = 20_000
    """Ordered-group cut sets in all up to which the oracle enumerates every cut set (exact for
    the model); above it, the frontier cut sets."""
    tp_explore: float = 0.1
    """Fraction of the work budget of each trial TP configuration (solve.tp; at the workload's own
    micro-batch size); the winning one is then searched again on the full budget with every
    size. On Sailor's 32-GPU cases (benchmarks/bench_sailor_cluster.py) 0.1 chooses the same
    configurations and plans as 0.25 and 0.5 in half the time of 0.25 (under the cut DP charges
    before cut_work_call, which made a unit 3-40 times less work where memory binds, 0.25
    ranked LLAMA-3-8's V100 tp2 above tp4, 16% lost)."""
    tp_recheck: float = 0.05
    """After the TP descent, degree 1 everywhere is also searched on the full budget at every
    size unless the chosen configuration beats degree 1's screening objective by more than
    this fraction (so enabling TP does not lose to the degree-1 search within that slack)."""
    tp_all_sets_up_to: int = 12
    """Small slots (up to `small_devices` devices) with at most this many ways of forming TP
    units (solve.tp.all_unit_sets, the oracle's sets) search every one of them after the
    descent, which forms units in index or speed order only: on an outside audit's small TP
    slots (seeds 5557000+) within 1% of the oracle on 65 of 69, max 3.4%, from 62 and 36%;
    fresh seeds 5559000+: 35 of 38, max 2.1%, from 31 and 47%; median solve 18.7 -> 26.3 ms,
    the slowest 0.59 -> 0.58 s (24 sets: the same answers, up to 1.09 s)."""
    tp_pool_steps_up_to: int = 4
    """Slots with at most this many (kind, server) pools of two or more devices also try each
    pool at each degree of its own after the per-kind descent (solve.tp), so that stages of
    one kind may differ in degree: (|degrees| - 1) more trials per pool, each on a small slot."""
    size_explore: float = 0.25
    """Fraction of the work budget of the screening search at each micro-batch size
    (solve.micro_batch); the best screened size is then searched on the full budget. At 0.1 the
    u = 1 screen of bench_fidelity's 4 A100-80 + 4 A100-40 + 8 V100-16 case fell behind u = 2's
    and the choice came out 18% above a full search at u = 1; 0.25 and 0.5 find that plan."""
    size_recheck: float = 0.05
    """The best screened micro-batch size gets its full-budget search only when its screening
    objective is within this fraction above the best objective found (on Sailor's GPT-Neo-2.7
    case the screened sizes are 20-60% behind u = 1, and 0.5 of the budget found the full
    budget's plan at every size but one)."""

    class_from_devices: int = 16
    """Available devices from which a slot whose devices form few large classes of
    interchangeable devices is searched over uniform shapes per class (solve.classes) instead
    of (or, with SolveOptions.classes "both", besides) device by device."""
    class_max: int = 4
    """Most device classes for the class-level search (their options' combinations grow as the
    product)."""
    class_min_size: int = 4
    """Fewest devices in each class for the class-level search."""
    class_exact: int = 24
    """Combinations of class shapes scored exactly after the closed-form screen (solve.classes)."""
    class_swaps: int = 6
    """The class-level search's last step: from the best combination scored exactly, each
    class's option is replaced by each of that many of its options in turn (solve.classes)."""
    class_exact_per_set: int = 4
    """Besides those, the best combinations of each set of classes used scored exactly (the
    screen leaves out the sync between classes: on V100 + GH-96 GPT-Neo-2.7 servers, the GH-96
    pipelines alone came 29th by the screen and 1.1% below every combination with V100s)."""
    class_mixed_degrees: bool = True
    """Chains through several classes with each class at its own TP degree (False: one degree
    for the whole chain). On bench_classes' packaged pools 18 of 64 plans improve, by up to
    27% (VGG-16 on A100 + A10G + T4: T4 pairs at tp 2 behind tp-1 A10G and A100 stages), none
    gets worse; the class search then takes 1.3-1.6x as long (Sailor's 32 GPUs with TP
    searched, the same plan: 0.28 s against 0.20 s at session 18, 0.166 s against 0.125 s at
    session 19)."""

    def __post_init__(self) -> None:
        """Each field checked against its default's type: integers >= 0 (>= 1 for the counts in
        _AT_LEAST_ONE), numbers finite and >= 0 (> 0 for the divisors and fractions in
        _ABOVE_ZERO), frontier_relax a non-empty tuple of finite numbers > 0; TypeError for a
        wrong type, ValueError for a value out of range, each naming the field and the value."""
        for f in fields(self):
            x, name = getattr(self, f.name), f"SearchTuning.{f.name}"
            if isinstance(f.default, bool):
                if not isinstance(x, bool):
                    raise TypeError(f"{name}: expected True or False, got {x!r} ({type(x).__name__})")
            elif isinstance(f.default, int):
                low = 1 if f.name in _AT_LEAST_ONE else 0
                if isinstance(x, bool) or not isinstance(x, numbers.Integral):
                    raise TypeError(f"{name}: expected an integer >= {low}, got {x!r} ({type(x).__name__})")
                if x < low:
                    raise ValueError(f"{name}: expected an integer >= {low}, got {x!r}")
            elif isinstance(f.default, float):
                _check_amount(name, x, f.name in _ABOVE_ZERO)
            else:
                if not isinstance(x, tuple):
                    raise TypeError(f"{name}: expected a tuple of finite numbers > 0, got {x!r} ({type(x).__name__})")
                if not x:
                    raise ValueError(f"{name}: expected a non-empty tuple of finite numbers > 0, got ()")
                for i, r in enumerate(x):
                    _check_amount(f"{name}[{i}]", r, True)

    def small(self, n: int, L: int) -> bool:
        """True for a small slot (n available devices, L layers)."""
        return n <= self.small_devices and L <= self.small_layers

    def work_budget(self, n: int) -> int:
        """Work units of a slot with n available devices (see SolveOptions.max_structures)."""
        if n <= self.small_devices:
            return self.work_small
        if n <= self.medium_devices:
            return self.work_medium
        return self.work_large if n <= self.large_devices else self.work_huge

    def depth(self, n: int, L: int) -> int:
        """Most devices in one group."""
        return min(n, L, self.max_depth_many if n > self.many_devices else self.max_depth)


@dataclass(frozen=True)
class SolveOptions:
    """exact: use the exhaustive oracle (n <= 6); max_groups: at most this many groups;
    local_search: improve by local moves; frontier: cut sets per group tried in the polish;
    replan: charge migration from previous_plan; iterations_per_slot: iterations the migration
    time is amortised over; keep_candidates: return every scored plan; max_structures:
    deterministic work budget, the most structures the search tries after the fixed candidates
    (work units, see default_work_budget; None: default_work_budget(n, L)); time_limit_s: optional extra wall-clock limit (seconds,
    opt-in: it makes results depend on machine load) on the whole solve, every TP configuration and
    micro-batch size together (searches started after it has passed are left out, and the message says
    so; not with exact); the fixed candidates (baselines, cheapest,
    previous plan) are always scored; tuning: the search's tuning numbers (SearchTuning);
    schedules: also try 1F1B and activation recomputation per group where a memory cap binds
    (solve.schedules; False: GPipe without recomputation only, except the groups the baselines
    or the previous plan bring, with their own shares or re-optimised ones); recompute: with
    schedules, activation recomputation may be chosen too (False: 1F1B only, for a runtime that
    cannot recompute); one_f_one_b: with schedules, 1F1B
    may be chosen (False: GPipe, with recomputation where allowed, for a runtime without 1F1B:
    the training runtime's hand-written engine); recompute_tp: with recompute,
    recomputation may be chosen in TP configurations too (False: a search on a state with TP
    units of more than one device chooses none there, for a runtime that recomputes stages
    of one device only); tp_degrees: tensor-parallel
    degrees a stage may have besides 1, which is always searched too (solve.tp; used only where
    the instance declares servers; (1,): no TP);
    classes: "both" (the default): where a slot's available devices form a pool of few large
    classes of interchangeable devices (solve.classes; SearchTuning.class_from_devices etc. say
    when), the class-level search runs beside the device-level search and the better plan is
    returned; "auto": the class-level search alone there (3.5-8.4x faster in median, within 1% on
    143 of 148 clusters measured, up to 9.6% worse on others: benchmarks/bench_classes.py);
    "off": the device-level search alone; pause_gc: pause Python's cyclic garbage collector
    for the solve (solve.gc_pause; restored when it returns or raises): the solve allocates
    many short-lived container objects, and the collector's passes over the whole process
    cost up to a sixth of a 32-GPU solve's time when they come (benchmarks/bench_gc.py); caps, cap_weight:
    per budget, the most cost per iteration in budgets' worth (c_k / Cbar_k, migration's share
    included) a plan may use before its objective pays cap_weight (objective units) per budget's
    worth above it: the budget tracker's search for a plan within its allowance (online.tracking),
    whose plans the weights' searches alone reach only on the hull of the slot's frontier (None:
    no caps; the search's bounds stay valid, since the penalty is never negative). Counts and
    limits are checked when built (ValueError naming the field: iterations_per_slot, frontier
    and max_groups integers >= 1, time_limit_s and max_structures numbers >= 0 or None, each cap
    in [-QUEUE_MAX, QUEUE_MAX] or inf, cap_weight in [0, CAP_WEIGHT_MAX]; the caps' count against
    the budgets when solved)."""

    exact: bool = False
    max_groups: int | None = None
    local_search: bool = True
    frontier: int = 4
    replan: bool = True
    iterations_per_slot: int = 100
    keep_candidates: bool = False
    time_limit_s: float | None = None
    max_structures: float | None = None
    tuning: SearchTuning = field(default_factory=SearchTuning)
    schedules: bool = True
    recompute: bool = True
    one_f_one_b: bool = True
    recompute_tp: bool = True
    tp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    classes: str = "both"
    pause_gc: bool = True
    caps: tuple[float, ...] | None = None
    cap_weight: float = 0.0

    def __post_init__(self) -> None:
        def count(name: str, low: int, none_ok: bool = False) -> None:
            x = getattr(self, name)
            if none_ok and x is None:
                return
            if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < low:
                raise ValueError(f"{name}: expected an integer >= {low}{' or None' if none_ok else ''}, got {x!r}")

        def amount(name: str) -> None:
            x = getattr(self, name)
            if x is not None and (isinstance(x, bool) or not isinstance(x, numbers.Real) or not x >= 0
                                  or math.isnan(x)):
                raise ValueError(f"{name}: expected a number >= 0 or None, got {x!r}")

        count("iterations_per_slot", 1)
        count("max_groups", 1, none_ok=True)
        count("frontier", 1)
        amount("time_limit_s")
        amount("max_structures")
        if not isinstance(self.tuning, SearchTuning):
            raise TypeError(f"tuning: expected a SearchTuning, got {type(self.tuning).__name__}")
        self._check_caps()

    def _check_caps(self) -> None:
        """caps: None or a sequence of numbers in [-QUEUE_MAX, QUEUE_MAX] or inf (no cap);
        cap_weight: a number in [0, CAP_WEIGHT_MAX]. Their count against the budgets is checked
        by solve_slot, which knows the state."""
        if self.caps is not None:
            if isinstance(self.caps, (str, bytes)) or not hasattr(self.caps, "__len__"):
                raise TypeError(f"caps: expected None or one number per budget, got {self.caps!r}")
            for k, c in enumerate(self.caps):
                expected = f"caps[{k}]: expected a number >= {-QUEUE_MAX:g} and <= {QUEUE_MAX:g} or inf (no cap)"
                if isinstance(c, bool) or not isinstance(c, numbers.Real):
                    raise TypeError(f"{expected}, got {c!r} ({type(c).__name__})")
                if not (-QUEUE_MAX <= c <= QUEUE_MAX or c == math.inf):
                    raise ValueError(f"{expected}, got {c!r}")
        w = self.cap_weight
        expected = f"cap_weight: expected a finite number >= 0 and <= {CAP_WEIGHT_MAX:g}"
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            raise TypeError(f"{expected}, got {w!r} ({type(w).__name__})")
        if not 0 <= w <= CAP_WEIGHT_MAX:
            raise ValueError(f"{expected}, got {w!r}")


@dataclass(frozen=True)
class SlotResult:
    """Outcome of one slot. batch_time: predicted seconds per iteration (no migration; the
    event simulator's for a plan with a multi-stage 1F1B group, whose closed form, in
    `evaluation`, is an upper bound: docs/MODEL.md section 4); costs: per budget in state
    order, at batch_time; objective: what the search minimised, V T + sum Q_k c_k (+ W *
    migration / iterations when re-planning is charged) with T the closed-form batch time
    less the optimizer step (evaluation.batch_time - evaluation.optimizer_time: the search
    does not weigh the step, docs/MODEL.md section 8) and c_k at that T; status: a Status,
    OPTIMAL from the oracle where it is exact for the model, FEASIBLE from the search and from
    the oracle where it is optimal only over the frontier cut sets its message names,
    INFEASIBLE with plan None and the reason in message; message: what was done, in words;
    solve_time, migration_time: seconds; candidates: structures scored; candidate_pool:
    (Plan, batch_time, costs) when asked, at the closed form (as the search scores them); lower_bound: a value no plan's objective is below
    (solve.bounds; nan with no plan); gap: the certified gap (objective - lower_bound) /
    objective."""

    plan: Plan | None
    batch_time: float
    costs: tuple[float, ...]
    objective: float
    status: Status
    message: str
    solve_time: float
    candidates: int = 0
    migration_time: float = 0.0
    evaluation: Evaluation | None = None
    candidate_pool: tuple = ()
    lower_bound: float = math.nan

    @property
    def gap(self) -> float:
        """(objective - lower_bound) / objective: how far above the best possible plan this
        one can be, at most (nan with no plan or no bound; 0 when both are 0)."""
        if not (math.isfinite(self.objective) and math.isfinite(self.lower_bound)):
            return math.nan
        if self.objective == 0:
            return 0.0
        return max(0.0, (self.objective - self.lower_bound) / self.objective)

    @property
    def success(self) -> bool:
        """True when `plan` can be used (OPTIMAL or FEASIBLE)."""
        return self.status.success

    @classmethod
    def infeasible(cls, message: str, solve_time: float, candidates: int = 0) -> "SlotResult":
        """No plan: status INFEASIBLE, infinite batch time and objective, the reason in message."""
        return cls(None, math.inf, (), math.inf, Status.INFEASIBLE, message, solve_time, candidates)


def default_work_budget(n: int, L: int, tuning: SearchTuning | None = None) -> int:
    """Structures the search may try after the fixed candidates when
    SolveOptions.max_structures is None (deterministic: the result does not depend on machine
    load): generous for the small slots the oracle checks, bounded for large pools
    (SearchTuning.work_budget; L does not enter). One work unit is scoring one structure;
    cutting a k-device group costs Scorer.cut_work(k) units (so deep models spend the budget
    faster)."""
    return (tuning or SearchTuning()).work_budget(n)


def deadline_of(options: SolveOptions, t0: float) -> float:
    """The perf_counter time at which options' time limit, counted from t0, has passed (inf: none)."""
    return t0 + options.time_limit_s if options.time_limit_s is not None else math.inf


def past(deadline: float) -> bool:
    """True once `deadline` (perf_counter seconds) has passed."""
    return deadline < math.inf and time.perf_counter() > deadline


def time_left(options: SolveOptions, deadline: float, most: float = math.inf) -> SolveOptions:
    """options with its time limit set to min(most, the seconds left before `deadline`), at least
    0; options itself when there is no deadline."""
    if deadline == math.inf:
        return options
    return replace(options, time_limit_s=max(0.0, min(most, deadline - time.perf_counter())))


def screening(options: SolveOptions, budget: float) -> SolveOptions:
    """The options of a screening search (a TP configuration's trial, a micro-batch size's
    screen): `budget` work units, no extension past them (SearchTuning.extend_cap 1) and no
    floors of their own for the final steps (final_floor 0), so a screen costs what its
    fraction says; the full search that follows may extend."""
    return replace(options, max_structures=budget, tuning=replace(options.tuning, extend_cap=1.0, final_floor=0.0))
