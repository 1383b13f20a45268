"""A store whose unit costs are small: one L40S hour serving long prompts with a prefill of a
millisecond, so that the input side costs about 0.00014 USD per million tokens, and model and
instance names as long as real served ids (#16)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from sqlalchemy import Engine

from infersight.core.records import RequestRecord
from infersight.core.window import Window
from infersight.storage import cost
from infersight.storage.writer import open_writer
from tests.cost.scenario import MODEL, WEEK, gpu_series

SERVED: Final = "meta-llama/Llama-3.1-70B-Instruct"
INSTANCE: Final = "vllm-70b-h200-rack-07-node-3"
HOUR: Final = Window(WEEK.start, WEEK.start + timedelta(hours=1))


def write_cheap_prefill_hour(engine: Engine) -> None:
    writer = open_writer(engine)
    writer.write_gpu_samples(
        gpu_series(INSTANCE, HOUR, util=0.5, power_w=200.0, name="NVIDIA L40S")
    )
    writer.write_requests(
        [
            RequestRecord(
                trace_id=f"{i + 1:032x}",
                span_id=f"{i + 1:016x}",
                start=HOUR.start + timedelta(minutes=5 * i),
                instance=INSTANCE,
                engine="vllm",
                model=SERVED,
                tenant="acme",
                priority="interactive",
                ttft_s=0.2,
                tpot_s=0.01,
                e2e_s=10.2,
                queue_s=0.1,
                prefill_s=0.001,
                decode_s=10.0,
                input_tokens=100_000,
                output_tokens=1000,
                finish_reason="stop",
            )
            for i in range(10)
        ]
    )
    cost.put_model(engine, MODEL, WEEK.end)
