"""A fraction of a physical GPU: a MIG slice or a time-sliced share (issue 34).

A GPU sample carries its slice as one short text (``GpuSample.gpu_slice``, kept in
``gpu_samples`` and ``gpu_rollups``; empty for a whole GPU):

* ``mig:PROFILE:N/D`` — a MIG device of profile ``PROFILE`` (``3g.40gb``) that holds ``N`` of
  its parent GPU's ``D`` compute slices (NVML: the MIG device's GPU-instance slice count over
  the parent's full GPU-instance profile; dcgm-exporter: the profile's ``Ng`` over 7, or 4 on
  an A30);
* ``share:N/D`` — a time-sliced share of a GPU, declared by the operator (``infersight sidecar
  --gpu-share 0.25``), since nothing on the node reports it.

The fraction is exact (``fractions.Fraction``), so two slices of one GPU cost at most the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Final

from infersight.core.errors import InvalidInput

MAX_DENOMINATOR: Final = 1000
_PROFILE = re.compile(r"^[0-9]{1,2}g\.[0-9]{1,4}gb(\+[a-z0-9]{1,8})*(\.[a-z0-9+]{1,16})?$")
_MIG_NAME = re.compile(r"\bMIG\s+([0-9]{1,2})g\.([0-9]{1,4})gb\S*", re.IGNORECASE)

MIG: Final = "mig"
SHARE: Final = "share"


@dataclass(frozen=True, slots=True)
class GpuSlice:
    """What part of its parent GPU a device is: ``kind`` ``mig`` or ``share``."""

    kind: str
    fraction: Fraction
    profile: str = ""

    def __post_init__(self) -> None:
        if self.kind not in (MIG, SHARE):
            raise InvalidInput("a GPU slice is a MIG slice (mig) or a time-sliced share (share)")
        if not 0 < self.fraction <= 1 or self.fraction.denominator > MAX_DENOMINATOR:
            raise InvalidInput(
                f"a GPU slice's fraction must be in (0, 1], with a denominator of at most "
                f"{MAX_DENOMINATOR}",
                details={"fraction": str(self.fraction)},
            )
        if self.kind == MIG and not _PROFILE.match(self.profile):
            raise InvalidInput(
                "a MIG slice names its profile, e.g. 3g.40gb",
                details={"profile": self.profile[:32]},
            )
        if self.kind == SHARE and self.profile:
            raise InvalidInput("a time-sliced share has no profile")

    @property
    def text(self) -> str:
        f = f"{self.fraction.numerator}/{self.fraction.denominator}"
        return f"{MIG}:{self.profile}:{f}" if self.kind == MIG else f"{SHARE}:{f}"

    @property
    def fraction_decimal(self) -> Decimal:
        """The fraction to six places (for display; prices use the exact fraction)."""
        return (Decimal(self.fraction.numerator) / Decimal(self.fraction.denominator)).quantize(
            Decimal("0.000001")
        )

    def describe(self) -> str:
        """``MIG 3g.40gb (3/7 of the GPU)`` or ``time-sliced share (1/4 of the GPU)``."""
        f = f"{self.fraction.numerator}/{self.fraction.denominator}"
        if self.kind == MIG:
            return f"MIG {self.profile} ({f} of the GPU)"
        return f"time-sliced share ({f} of the GPU)"


def fraction_of(value: str | float | Fraction) -> Fraction:
    """``0.25``, ``"1/4"``, ``"0.25"`` → ``Fraction(1, 4)``; ``InvalidInput`` when not in (0, 1]."""
    try:
        fraction = (
            value if isinstance(value, Fraction) else Fraction(str(value).strip())
        ).limit_denominator(MAX_DENOMINATOR)
    except (ValueError, ZeroDivisionError):
        raise InvalidInput(
            "a GPU share is a fraction in (0, 1], e.g. 0.25 or 1/4",
            details={"value": str(value)[:32]},
        ) from None
    if not 0 < fraction <= 1:
        raise InvalidInput(
            "a GPU share is a fraction in (0, 1], e.g. 0.25 or 1/4",
            details={"value": str(value)[:32]},
        )
    return fraction


def parse_slice(text: str) -> GpuSlice | None:
    """The slice of a ``gpu_slice`` text; ``None`` for ``""`` (a whole GPU)."""
    if not text:
        return None
    parts = text.split(":")
    try:
        if parts[0] == MIG and len(parts) == 3:
            return GpuSlice(MIG, _exact(parts[2]), parts[1])
        if parts[0] == SHARE and len(parts) == 2:
            return GpuSlice(SHARE, _exact(parts[1]))
    except (ValueError, ZeroDivisionError):
        pass
    raise InvalidInput(
        "gpu_slice must be mig:PROFILE:N/D or share:N/D", details={"gpu_slice": text[:64]}
    )


def _exact(text: str) -> Fraction:
    n, _, d = text.partition("/")
    if not (n.isdigit() and d.isdigit()):
        raise ValueError(text)
    return Fraction(int(n), int(d))


def parent_slices(gpu_name: str) -> int:
    """Compute slices of a whole MIG-capable GPU: 4 on an A30, 7 on the others (A100, H100,
    H200, B200)."""
    return 4 if re.search(r"\bA30\b", gpu_name.upper()) else 7


def mig_slice(
    profile: str, parent_name: str = "", slices: int | None = None, total: int | None = None
) -> GpuSlice:
    """The slice of MIG profile ``profile`` (``3g.40gb``): ``slices`` (else the profile's
    ``Ng``) over the parent's ``total`` slices (else ``parent_slices(parent_name)``)."""
    profile = profile.strip().lower()
    if slices is None:
        m = re.match(r"^([0-9]{1,2})g\.", profile)
        if m is None:
            raise InvalidInput("a MIG profile starts with its slice count, e.g. 3g.40gb")
        slices = int(m.group(1))
    if total is None or not 0 < total <= 16:
        total = parent_slices(parent_name)
    return GpuSlice(MIG, Fraction(min(slices, total), total), profile)


def profile_of_name(name: str) -> str:
    """The MIG profile in an NVML MIG device name (``NVIDIA A100-SXM4-80GB MIG 3g.40gb`` →
    ``3g.40gb``), or ``""``."""
    m = _MIG_NAME.search(name)
    return m.group(0).split()[-1].lower() if m else ""
