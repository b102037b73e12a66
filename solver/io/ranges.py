"""Documented physical ranges of the numbers that instance files, traces, layer tables and
the hardware table give. A value outside its range is rejected with an InstanceError naming
the field and the value. The ranges are generous, one to several orders of magnitude beyond
today's hardware, so that they catch unit slips and absurd figures (a price of 1e300 USD/h
would keep a virtual queue at 1e299), not plausible ones; every shipped instance lies well
inside them (a test checks that each loads).

| field | unit | range | largest real figure it must admit |
| --- | --- | --- | --- |
| num_slots | slots | 1 .. 1e6 | 150 (aws_spot) |
| workload.batch, micro_batch | samples | 1 .. 1e7 | global batches of 64k samples |
| workload.optimizer_factor | bytes per parameter byte | (0, 100] | 4 (Adam, fp32) |
| workload.input_bytes | bytes per sample | 0 .. 1e12 | 600 kB (224x224x3 fp32) |
| peak_tflops | 1e12 FLOP/s | (0, 1e5] | 90 (H200 FP32) |
| memory_gb | 1e9 bytes | (0, 1e5] | 141 (H200) |
| busy_w, idle_w | W | 0 .. 1e5 | 700 (H100 SXM) |
| price_per_hour | USD per device-hour | 0 .. 1e4 | 11 (on-demand H100 list prices) |
| efficiency | fraction of peak | (0, 1] | 1 |
| gbps | Gbit/s | (0, 1e6] | 7200 (NVLink 4, 900 GB/s) |
| latency_ms | ms | 0 .. 1e5 | 600 (geostationary satellite round trip) |
| speed_factor | fraction of nominal speed | (0, 1000] | 1 |
| budget limit, money | USD per iteration | 1e-10 .. 1e6 | 0.01 (smallest: 1e-7, a CPU test cluster) |
| budget limit, energy and device_energy | J per iteration | 1e-6 .. 1e12 | 2500 |
| layer fwd_flops, bwd_flops | FLOP per sample | 0 .. 1e18 | 1.6e11 (GPT-2 small head) |
| layer out_bytes, stash_bytes, param_bytes | bytes | 0 .. 1e15 | 4e8 (VGG-16 fc6) |
| layer fwd_s:<kind>, bwd_s:<kind> | seconds per sample | 0 .. 1e5 | 1e-3 |
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """lo <= value <= hi (lo < value where lo_open), in `unit`."""

    lo: float
    hi: float
    unit: str = ""
    lo_open: bool = False

    def problem(self, value: float) -> str | None:
        """None when `value` lies in the range, else what is wrong ("must be > 0 and <= 1e4 W")."""
        if math.isfinite(value) and (value > self.lo or (value == self.lo and not self.lo_open)) \
                and value <= self.hi:
            return None
        return f"must be {'>' if self.lo_open else '>='} {self.lo:g} and <= {self.hi:g}" \
               + (f" {self.unit}" if self.unit else "")


SLOTS = Range(1, 1e6, "slots")
ITERATIONS = Range(1, 1e9, "iterations")
RESTART_S = Range(0, 1e6, "s")
SAMPLES = Range(1, 1e7, "samples")
OPTIMIZER_FACTOR = Range(0, 100, "bytes per parameter byte", lo_open=True)
INPUT_BYTES = Range(0, 1e12, "bytes per sample")
PEAK_TFLOPS = Range(0, 1e5, "TFLOP/s", lo_open=True)
MEMORY_GB = Range(0, 1e5, "GB", lo_open=True)
RESERVE_GB = Range(0, 1e5, "GB (or GB/s)")
POWER_W = Range(0, 1e5, "W")
PRICE_PER_HOUR = Range(0, 1e4, "USD per hour")
EFFICIENCY = Range(0, 1, "(fraction of peak)", lo_open=True)
GBPS = Range(0, 1e6, "Gbit/s", lo_open=True)
LATENCY_MS = Range(0, 1e5, "ms")
SPEED_FACTOR = Range(0, 1e3, "(fraction of nominal speed)", lo_open=True)
BUDGET_LIMIT = {"money": Range(1e-10, 1e6, "USD per iteration"),
                "energy": Range(1e-6, 1e12, "J per iteration"),
                "device_energy": Range(1e-6, 1e12, "J per iteration")}
LAYER_FLOPS = Range(0, 1e18, "FLOP per sample")
LAYER_BYTES = Range(0, 1e15, "bytes")
LAYER_SECONDS = Range(0, 1e5, "s per sample")
