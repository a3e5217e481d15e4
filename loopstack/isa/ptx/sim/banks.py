"""Shared-memory bank conflicts of a kernel's accesses: a performance signal the interpreter gives
without a GPU (the access patterns are the kernel's, whatever runs it).

Shared memory is 32 banks of 4-byte words, word w in bank w % 32.  A warp's access is served in
phases: all 32 lanes together for accesses of up to 4 bytes, half-warps for 8 bytes and
quarter-warps for 16 (ldmatrix's 8 x 8 matrices are such quarters: lanes 8j..8j+7 give the 16-byte
rows of matrix j).  A phase takes as many wavefronts as the most distinct words it touches in any
one bank (lanes touching the same word share it); its ideal is its distinct words over 32,
rounded up.  cp.async is counted where it is issued (the bytes it will write), ld, st and
ldmatrix where they run.  The hardware's exact arbitration is not modelled beyond this rule,
which is the one NVIDIA documents for these access widths.

    profile = {}
    launch(ptx, entry, grid, block, args, bank_profile=profile)
    print(bank_report(profile))     # per instruction: phases, wavefronts, their ratio to the ideal
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WORD = 4
BANKS = 32
WARP = 32


@dataclass
class BankStats:
    """One instruction's shared accesses over a launch."""

    opcode: str
    phases: int = 0
    wavefronts: int = 0
    ideal: int = 0

    @property
    def ratio(self) -> float:
        """Wavefronts per ideal wavefront: 1.0 is conflict-free, 32.0 every lane in one bank."""
        return self.wavefronts / self.ideal if self.ideal else 1.0


class BankCounter:
    """Accumulates BankStats per instruction ((line, text) -> BankStats) into `profile`."""

    def __init__(self, profile: dict):
        self.profile = profile

    def count(self, instr, lanes, addr, size: int) -> None:
        lanes = np.asarray(lanes, dtype=np.int64)
        if lanes.size == 0:
            return
        addr = np.asarray(addr, dtype=np.uint64).astype(np.int64)
        per_phase = WARP if size <= 4 else WARP // 2 if size <= 8 else WARP // 4
        phase = (lanes // WARP) * (WARP // per_phase) + (lanes % WARP) // per_phase
        words_per_lane = max(1, size // WORD)
        words = (addr // WORD)[:, None] + np.arange(words_per_lane, dtype=np.int64)
        # distinct (phase, word) pairs: lanes reading one word share it (a broadcast)
        pairs = np.unique((np.repeat(phase, words_per_lane) << 32) | words.reshape(-1))
        ph, word = pairs >> 32, pairs & 0xFFFFFFFF
        phases, ph_index, in_phase = np.unique(ph, return_inverse=True, return_counts=True)
        # per phase, the most distinct words in one bank
        banks, per_bank = np.unique(ph_index * BANKS + word % BANKS, return_counts=True)
        worst = np.zeros(len(phases), dtype=np.int64)
        np.maximum.at(worst, banks // BANKS, per_bank)
        key = (instr.line, instr.text)
        stats = self.profile.get(key)
        if stats is None:
            stats = self.profile[key] = BankStats(instr.full)
        stats.phases += len(phases)
        stats.wavefronts += int(worst.sum())
        stats.ideal += int((-(-in_phase // BANKS)).sum())


def by_opcode(profile: dict) -> dict:
    """The profile summed per instruction name ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", ...)."""
    out: dict = {}
    for stats in profile.values():
        s = out.setdefault(stats.opcode, BankStats(stats.opcode))
        s.phases += stats.phases
        s.wavefronts += stats.wavefronts
        s.ideal += stats.ideal
    return out


def bank_report(profile: dict) -> str:
    """One line per instruction that touched shared memory, in program order."""
    rows = [f"{'line':>5}  {'phases':>8} {'wavefronts':>10} {'x ideal':>8}  instruction"]
    for (line, text), s in sorted(profile.items()):
        rows.append(f"{line:>5}  {s.phases:>8} {s.wavefronts:>10} {s.ratio:>8.2f}  {text}")
    return "\n".join(rows)
