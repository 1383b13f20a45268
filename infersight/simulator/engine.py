"""A discrete-event model of one continuous-batching inference server (vLLM V1's scheduler).

Requests arrive, wait for the single frontend tokenizer (CPU time per input token), join the
engine's waiting queue, and are scheduled step by step: every step the running requests
decode one token each, and waiting requests are admitted while the batch has room
(``max_num_seqs``), the step has token budget (chunked prefill, ``max_num_batched_tokens``)
and the KV cache has free slots. When a decode step needs more KV slots than are free, the
newest running request is preempted and later recomputed. A step costs CPU scheduling time
plus a GPU forward pass whose time grows with the batch, the KV tokens read and the prefill
tokens (``StepCosts``); faults scale those costs (``Effects``).

Per-step work is O(1) in the batch size: decoding requests share one step counter, their
completions sit in a heap keyed by the counter value at which they finish, and KV usage is an
aggregate. Time is virtual: ``advance_to(t)`` runs every step that starts before ``t``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

import numpy as np

from infersight.core.records import Engine, RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.simulator.events import Batch, Completion, EngineSample, LoraState
from infersight.simulator.faults import Effects, FaultSchedule
from infersight.simulator.profiles import ModelProfile, SpeculativeDecoding
from infersight.simulator.request import (
    Family,
    IdSource,
    Labels,
    RequestState,
    TokenListener,
    finished_record,
    fold_sequences,
    refused_record,
)
from infersight.simulator.telemetry import GpuCounters, gpu_samples
from infersight.simulator.workload import Arrival, ArrivalStream, LoraServing

#: Model execute time = forward time plus sampling and cross-worker synchronisation.
_EXECUTE_OVERHEAD: Final = 1.04


class InstanceSim:
    """One simulated vLLM server in virtual time."""

    def __init__(
        self,
        name: str,
        profile: ModelProfile,
        *,
        epoch: datetime,
        rng: np.random.Generator,
        arrivals: ArrivalStream | None = None,
        faults: FaultSchedule | None = None,
        sample_interval_s: float = 10.0,
        service: str = "",
        id_source: Callable[[int], bytes] | None = None,
        sampling: tuple[float, float] = (0.7, 0.95),
        coalesce_steps: bool = True,
        engine_index: int = 0,
        gpu_telemetry: bool = True,
        speculative: SpeculativeDecoding | None = None,
        role: str = "",
        lora: LoraServing | None = None,
    ) -> None:
        self.name = name
        #: ``prefill`` / ``decode`` in a disaggregated deployment, else ``""``.
        self.role = role
        #: Which data-parallel engine of the instance this is (vLLM's ``engine`` label).
        self.engine_index = engine_index
        self._gpu_telemetry = gpu_telemetry
        self.speculative = speculative
        #: vLLM's speculative-decoding counters: drafts, draft tokens, accepted tokens.
        self.spec_totals = [0.0, 0.0, 0.0]
        #: LoRA adapters served beside the base model, and the running sequences of each
        #: adapter (an adapter with none is not a key).
        self.lora = lora
        self._lora_running: dict[str, int] = {}
        self.profile = profile
        self.service = service or name
        self.model = profile.model_name
        self.epoch = epoch
        self._rng = rng
        self._ids = IdSource(id_source or rng.bytes)
        self._labels = Labels(name, self.service, self.model, epoch)
        self._arrivals = arrivals
        self._faults = faults or FaultSchedule(())
        self._interval = sample_interval_s
        self._kv_tokens = profile.kv_cache_tokens
        self._coalesce = coalesce_steps
        self._sampling = sampling
        self.t = 0.0
        self._rid = 0
        self._tok_free = 0.0
        self._pending: deque[RequestState] = deque()
        #: Requests waiting for their KV cache from a prefill instance (vLLM's "deferred").
        self._deferred: list[tuple[float, int, RequestState]] = []
        self.kv_transfer_tokens_total = 0
        self._waiting: deque[RequestState] = deque()
        self._prefilling: list[RequestState] = []
        self._decoding: dict[int, RequestState] = {}
        self._heap: list[tuple[int, int, int]] = []
        self._counter = 0
        self._dec_base = 0  # Σ (input + gen_at_join − join_counter) over decoding requests
        self._pf_kv = 0
        self._streaming = 0
        self._cum_gpu = 0.0
        self._cum_cpu = 0.0
        self.preemptions_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.errors_total = 0
        self._next_sample = sample_interval_s
        self._iv_busy = 0.0
        self._gpu_counters = [GpuCounters() for _ in range(profile.tensor_parallel)]
        self._completions: list[Completion] = []
        self._server: list[ServerSample] = []
        self._engine_samples: list[EngineSample] = []
        self._gpu: list[GpuSample] = []

    # -- inputs -------------------------------------------------------------------------

    def submit(
        self,
        arrival: Arrival,
        *,
        listener: TokenListener | None = None,
        temperature: float = 0.7,
        top_p: float = 0.95,
        kv_transfer_s: float | None = None,
        kv_failed: bool = False,
    ) -> None:
        """A request reaches the server's frontend at ``arrival.t`` (≥ the last arrival).

        With ``kv_transfer_s`` (a disaggregated decode instance) its prompt's KV cache comes
        from a prefill instance: the request waits (deferred) that long after it is queued,
        then only its last prompt token is computed here (or, ``kv_failed``, it errors)."""
        fx = self._faults.effects(arrival.t)
        tok = self.profile.tokenizer.time(arrival.input_tokens) * fx.tokenizer_factor
        start = max(arrival.t, self._tok_free)
        queued = start + tok
        self._tok_free = queued
        self._rid += 1
        r = RequestState(self._rid, arrival, queued, tok)
        r.temperature, r.top_p = temperature, top_p
        if kv_transfer_s is not None:
            r.external = max(0, arrival.input_tokens - 1)
            r.prefill_left = arrival.input_tokens - r.external
            r.kv_ready = queued + kv_transfer_s
            r.kv_failed = kv_failed
        if listener is not None:
            r.listener = listener
        self._pending.append(r)

    # -- state --------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._prefilling) + len(self._decoding)

    @property
    def waiting(self) -> int:
        """vLLM's ``num_requests_waiting``: the requests deferred for their KV cache too."""
        return len(self._waiting) + len(self._deferred)

    @property
    def deferred(self) -> int:
        return len(self._deferred)

    @property
    def kv_used(self) -> int:
        return self._dec_base + len(self._decoding) * self._counter + self._pf_kv

    def kv_capacity(self, fx: Effects) -> int:
        return max(1, int(self._kv_tokens * fx.kv_scale))

    def next_event(self) -> float:
        """When ``advance_to`` next has work: the next step, else the next queued request."""
        if self._busy():
            return self.t
        nxt = self._pending[0].queued if self._pending else math.inf
        if self._deferred:
            nxt = min(nxt, self._deferred[0][0])
        if self._arrivals is not None:
            nxt = min(nxt, self._arrivals.peek_time())
        return nxt

    def _busy(self) -> bool:
        return bool(self._waiting or self._prefilling or self._decoding)

    # -- the loop -----------------------------------------------------------------------

    def advance_to(self, t_end: float) -> None:
        """Run every step that starts before ``t_end``; idle time jumps to the next event."""
        while True:
            if self._arrivals is not None:
                for a in self._arrivals.pop_until(self.t):
                    self.submit(a, temperature=self._sampling[0], top_p=self._sampling[1])
            pending = self._pending
            while pending and pending[0].queued <= self.t:
                r = pending.popleft()
                if r.kv_ready > self.t:
                    heapq.heappush(self._deferred, (r.kv_ready, r.rid, r))
                else:
                    self._ready(r)
            deferred = self._deferred
            while deferred and deferred[0][0] <= self.t:
                self._ready(heapq.heappop(deferred)[2])
            if not self._busy():
                nxt = pending[0].queued if pending else math.inf
                if deferred:
                    nxt = min(nxt, deferred[0][0])
                if self._arrivals is not None:
                    nxt = min(nxt, self._arrivals.peek_time())
                if nxt >= t_end:
                    self._sample_until(t_end)
                    self.t = max(self.t, t_end)
                    return
                self._sample_until(nxt)
                self.t = max(self.t, nxt)
                continue
            if self.t >= t_end:
                return
            self._sample_until(self.t)
            self._step(t_end)

    def _ready(self, r: RequestState) -> None:
        """Queued, its KV cache (if it waited for one) here: schedulable, or failed."""
        if r.kv_failed:
            self._reject(r, max(r.kv_ready, r.queued), "kv_transfer_failed")
        else:
            self._waiting.append(r)

    def _step(self, t_end: float) -> None:
        t = self.t
        fx = self._faults.effects(t)
        capacity = self.kv_capacity(fx)
        chunks = self._schedule(t, capacity, fx)
        n_dec = len(self._decoding)
        if not chunks:
            if not n_dec:
                if self._prefilling:  # nothing fits: give back the newest partial prefill
                    self._preempt_newest()
                return
            quiet = not self._prefilling and not self._streaming
            if quiet and self._coalesce and self._bulk(t_end, fx, capacity):
                return
        prefill_tokens = sum(c for _, c in chunks)
        seqs = n_dec + len(chunks)
        step = self.profile.step
        if self.speculative is not None and n_dec:
            # Verification steps yield fewer tokens when acceptance falls: decode slows.
            # A slower decode or prefill (a pool's overload) applies here as on every path.
            decode = step.gpu_time(seqs, self.kv_used, 0) * self._spec_slowdown(fx)
            decode *= fx.decode_factor
            prefill = step.prefill_per_token_s * prefill_tokens * fx.prefill_factor
            gpu = (decode + prefill) * fx.gpu_factor
            self._count_speculation(n_dec, fx)
        elif fx.prefill_factor != 1.0 or fx.decode_factor != 1.0:
            decode = step.gpu_time(seqs, self.kv_used, 0) * fx.decode_factor
            prefill = step.prefill_per_token_s * prefill_tokens * fx.prefill_factor
            gpu = (decode + prefill) * fx.gpu_factor
        else:
            gpu = step.gpu_time(seqs, self.kv_used, prefill_tokens) * fx.gpu_factor
        if self._lora_running:
            gpu *= self._lora_factor()
        cpu = self.profile.step.cpu_overhead_s * fx.cpu_factor
        end = t + cpu + gpu
        self._cum_gpu += gpu
        self._cum_cpu += cpu
        self._iv_busy += gpu
        self.prompt_tokens_total += prefill_tokens
        self.generation_tokens_total += n_dec
        self._decode_step(end)
        self._prefill_step(chunks, end)
        self.t = end

    def _bulk(self, t_end: float, fx: Effects, capacity: int) -> bool:
        """Run k > 1 identical decode-only steps at once when nothing can change between them.

        Nothing changes until the next completion, the next arrival or queued request, a sample
        or fault boundary, ``t_end``, or the step whose KV growth would force a preemption.
        Step ``j`` lasts ``c0 + c1·j`` (KV reads grow by one token per sequence per step).
        """
        heap, decoding = self._heap, self._decoding
        while heap and (
            heap[0][1] not in decoding or decoding[heap[0][1]].generation != heap[0][2]
        ):
            heapq.heappop(heap)
        n = len(decoding)
        kv0 = self.kv_used
        k = min(heap[0][0] - self._counter, (capacity - kv0) // n)
        if k < 2:
            return False
        t = self.t
        bound = min(t_end, self._next_sample, self._faults.stable_until(t))
        if self._pending:
            bound = min(bound, self._pending[0].queued)
        if self._deferred:
            bound = min(bound, self._deferred[0][0])
        if self._arrivals is not None:
            bound = min(bound, self._arrivals.peek_time())
        cost = self.profile.step
        f = fx.gpu_factor * self._spec_slowdown(fx) * fx.decode_factor
        if self._lora_running:
            f *= self._lora_factor()
        g0 = f * (cost.decode_base_s + cost.decode_per_seq_s * n + cost.decode_per_kv_token_s * kv0)
        c1 = f * cost.decode_per_kv_token_s * n
        cpu = cost.cpu_overhead_s * fx.cpu_factor
        c0 = g0 + cpu
        # Steps j = 0..k−1 must all start before ``bound``: t + j·c0 + c1·j(j−1)/2 < bound.
        room = bound - t
        if c1 > 0:
            b = c0 - c1 / 2
            j_max = (-b + math.sqrt(b * b + 2 * c1 * room)) / c1
        else:
            j_max = room / c0
        k = min(k, math.ceil(j_max))
        while k > 1 and c0 * (k - 1) + c1 * (k - 1) * (k - 2) / 2 >= room:
            k -= 1
        if k < 2:
            return False
        gpu = k * g0 + c1 * k * (k - 1) / 2
        end = t + gpu + k * cpu
        self._cum_gpu += gpu
        self._cum_cpu += k * cpu
        self._iv_busy += gpu
        self.generation_tokens_total += k * n
        if self.speculative is not None:
            self._count_speculation(k * n, fx)
        self._counter += k - 1
        self._decode_step(end)
        self.t = end
        return True

    def _lora_factor(self) -> float:
        """A step whose batch holds adapter sequences (``LoraServing.step_overhead``)."""
        return 1.0 + self.lora.step_overhead if self.lora is not None else 1.0

    def _lora_enter(self, r: RequestState) -> None:
        if r.adapter:
            self._lora_running[r.adapter] = self._lora_running.get(r.adapter, 0) + 1

    def _lora_leave(self, r: RequestState) -> None:
        if r.adapter:
            left = self._lora_running[r.adapter] - 1
            if left:
                self._lora_running[r.adapter] = left
            else:
                del self._lora_running[r.adapter]

    def _lora_blocked(self, r: RequestState) -> bool:
        """vLLM's ``--max-loras``: a batch holds that many adapters; a request of another
        one waits (skipped: the requests behind it may be scheduled)."""
        lora = self.lora
        return (
            lora is not None
            and bool(r.adapter)
            and r.adapter not in self._lora_running
            and len(self._lora_running) >= lora.max_lora
        )

    def _spec_slowdown(self, fx: Effects) -> float:
        if self.speculative is None or fx.spec_acceptance_scale == 1.0:
            return 1.0
        return self.speculative.slowdown(fx.spec_acceptance_scale)

    def _count_speculation(self, tokens: int, fx: Effects) -> None:
        """``tokens`` output tokens came from verification steps of the current length."""
        assert self.speculative is not None
        length = self.speculative.accept_length(fx.spec_acceptance_scale)
        steps = tokens / length
        totals = self.spec_totals
        totals[0] += steps
        totals[1] += steps * self.speculative.num_speculative_tokens
        totals[2] += tokens - steps

    def _schedule(self, t: float, capacity: int, fx: Effects) -> list[tuple[RequestState, int]]:
        """This step's prefill chunks; decoding requests always run (after making KV room)."""
        n_dec = len(self._decoding)
        while n_dec and self.kv_used + n_dec > capacity:
            self._preempt_newest()
            n_dec = len(self._decoding)
        budget = self.profile.max_num_batched_tokens - n_dec
        free = capacity - self.kv_used - n_dec
        chunks: list[tuple[RequestState, int]] = []
        for r in self._prefilling:
            chunk = min(r.prefill_left, budget, free)
            if chunk > 0:
                chunks.append((r, chunk))
                budget -= chunk
                free -= chunk
        max_seqs = self.profile.max_num_seqs
        if fx.seq_scale != 1.0:
            max_seqs = max(1, int(max_seqs * fx.seq_scale))
        seats = max_seqs - n_dec - len(self._prefilling)
        limit = min(capacity, self.profile.max_model_len)
        skipped: list[RequestState] = []
        while self._waiting and seats > 0 and budget > 0:
            r = self._waiting[0]
            if r.input_tokens + r.gen > limit:
                self._waiting.popleft()
                self._reject(r, t)
                continue
            if r.adapter and self._lora_blocked(r):
                skipped.append(self._waiting.popleft())
                continue
            chunk = min(r.prefill_left, budget)
            if chunk + r.external > free:
                break
            self._waiting.popleft()
            if r.first_sched < 0:
                r.first_sched, r.g0, r.c0 = t, self._cum_gpu, self._cum_cpu
            if r.external:  # the transferred KV cache takes its slots now
                r.computed = r.external
                self._pf_kv += r.external
                self.prompt_tokens_total += r.external
                self.kv_transfer_tokens_total += r.external
                free -= r.external
                r.external = 0
            self._prefilling.append(r)
            self._lora_enter(r)
            chunks.append((r, chunk))
            budget -= chunk
            free -= chunk
            seats -= 1
        if skipped:
            self._waiting.extendleft(reversed(skipped))
        return chunks

    def _decode_step(self, end: float) -> None:
        """Every decoding request gets one token; those that reach their length finish."""
        if self._streaming:
            for r in self._decoding.values():
                if r.listener is not None:
                    r.listener.on_token(end)
        self._counter += 1
        heap = self._heap
        while heap and heap[0][0] <= self._counter:
            _, rid, generation = heapq.heappop(heap)
            done = self._decoding.get(rid)
            if done is not None and done.generation == generation:
                self._leave_decoding(done)
                done.gen = done.output_tokens
                self._finish(done, end)

    def _prefill_step(self, chunks: list[tuple[RequestState, int]], end: float) -> None:
        for r, chunk in chunks:
            r.prefill_left -= chunk
            r.computed += chunk
            self._pf_kv += chunk
            if r.prefill_left:
                continue
            self._prefilling.remove(r)
            self._pf_kv -= r.computed
            r.computed = 0
            r.gen += 1  # the forward pass that completes a prefill samples a token
            self.generation_tokens_total += 1
            if r.first_token < 0:
                r.first_token = end
            if r.listener is not None:
                r.listener.on_token(end)
            if r.siblings and r.family is None:
                self._fork(r, end)
            if r.gen >= r.output_tokens:
                self._finish(r, end)
            else:
                self._join_decoding(r)

    def _fork(self, r: RequestState, end: float) -> None:
        """Parallel sampling: the prompt was computed once; the pass that completed it
        samples every sequence's first token, and each sequence decodes on its own. The
        prompt's KV blocks are shared, charged to the sequences in equal parts (freed as each
        finishes: a simplification of block reference counting)."""
        n = 1 + len(r.siblings)
        r.family = Family(n, r.listener)
        share, rest = divmod(r.input_tokens, n)
        r.kv_prompt = share + rest
        for output in r.siblings:
            self._rid += 1
            child = r.fork(self._rid, output)
            child.kv_prompt = share
            self._lora_enter(child)
            self.generation_tokens_total += 1
            if child.gen >= child.output_tokens:
                self._finish(child, end)
            else:
                self._join_decoding(child)

    def _join_decoding(self, r: RequestState) -> None:
        r.gen_at_join, r.join_counter = r.gen, self._counter
        r.finish_at = self._counter + (r.output_tokens - r.gen)
        self._dec_base += r.kv_prompt + r.gen - self._counter
        self._decoding[r.rid] = r
        if r.listener is not None:
            self._streaming += 1
        heapq.heappush(self._heap, (r.finish_at, r.rid, r.generation))

    def _leave_decoding(self, r: RequestState) -> None:
        del self._decoding[r.rid]
        self._dec_base -= r.kv_prompt + r.gen_at_join - r.join_counter
        if r.listener is not None:
            self._streaming -= 1

    def _preempt_newest(self) -> None:
        """vLLM V1 preempts from the end of the running list and recomputes later."""
        if self._prefilling:
            r = self._prefilling.pop()
            self._pf_kv -= r.computed
            self._lora_leave(r)
        else:
            rid = next(reversed(self._decoding))
            r = self._decoding[rid]
            self._leave_decoding(r)
            self._lora_leave(r)
            r.gen = r.gen_at_join + self._counter - r.join_counter
            r.generation += 1
        r.computed = 0
        r.prefill_left = r.input_tokens + r.gen
        r.preemptions += 1
        self.preemptions_total += 1
        self._waiting.appendleft(r)

    # -- outputs ------------------------------------------------------------------------

    def _finish(self, r: RequestState, end: float) -> None:
        self._lora_leave(r)
        trace_id, span_id, request_id = self._ids.next()
        if r.family is not None:
            family = r.family
            if not family.trace_id:
                family.trace_id, family.request_id = r.trace_id or trace_id, request_id
            record = finished_record(r, self._labels, family.trace_id, span_id, end)
            self._sequence_done(r, family, record)
            return
        self.requests_total += 1
        record = finished_record(r, self._labels, r.trace_id or trace_id, span_id, end)
        self._emit(r, record, request_id)

    def _sequence_done(self, r: RequestState, family: Family, record: RequestRecord) -> None:
        """One sequence of a parallel-sampling request ended; the last one's end emits the
        user's request (one completion, each sequence's record in ``sequences``)."""
        family.records.append(record)
        family.preemptions += r.preemptions
        family.left -= 1
        if family.left:
            return
        user = fold_sequences(family.records)
        self.requests_total += 1
        self.errors_total += user.is_error
        r.preemptions = family.preemptions
        r.listener = family.listener
        self._emit(r, user, family.request_id, tuple(family.records))

    def _reject(self, r: RequestState, t: float, error: str = "context_length_exceeded") -> None:
        """A prompt that can never fit the KV cache or the context is refused (or, on a
        decode instance, its KV cache never arrived)."""
        trace_id, span_id, request_id = self._ids.next()
        if r.family is not None:  # a preempted sequence that no longer fits
            family = r.family
            if not family.trace_id:
                family.trace_id, family.request_id = r.trace_id or trace_id, request_id
            record = refused_record(r, self._labels, family.trace_id, span_id, t, error)
            self._sequence_done(r, family, record)
            return
        self.requests_total += 1
        self.errors_total += 1
        record = refused_record(r, self._labels, r.trace_id or trace_id, span_id, t, error)
        r.first_sched = t
        self._emit(r, record, request_id)

    def _emit(
        self,
        r: RequestState,
        record: RequestRecord,
        request_id: str,
        sequences: tuple[RequestRecord, ...] = (),
    ) -> None:
        forward = self._cum_gpu - r.g0 if r.first_sched >= 0 else 0.0
        completion = Completion(
            record=record,
            request_id=request_id,
            max_tokens=r.max_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
            tokenize_s=r.tokenize_s,
            scheduler_s=self._cum_cpu - r.c0 if r.first_sched >= 0 else 0.0,
            forward_s=forward,
            execute_s=forward * _EXECUTE_OVERHEAD,
            preemptions=r.preemptions,
            engine=self.engine_index,
            parent_span_id=r.parent_span_id,
            sequences=sequences,
        )
        self._completions.append(completion)
        if r.listener is not None:
            r.listener.on_finish(completion)

    def _sample_until(self, t: float) -> None:
        while self._next_sample <= t:
            ts_s = self._next_sample
            ts = self.epoch + timedelta(seconds=ts_s)
            fx = self._faults.effects(ts_s - 1e-9)
            busy = self._iv_busy / self._interval
            self._iv_busy = 0.0
            sample = ServerSample(
                ts=ts,
                instance=self.name,
                engine=Engine.VLLM.value,
                model=self.model,
                requests_running=float(self.running),
                requests_waiting=float(self.waiting),
                requests_swapped=0.0,
                kv_cache_usage=min(1.0, self.kv_used / self.kv_capacity(fx)),
                prefix_cache_hit_ratio=0.0,
                preemptions_total=float(self.preemptions_total),
                prompt_tokens_total=float(self.prompt_tokens_total),
                generation_tokens_total=float(self.generation_tokens_total),
                requests_total=float(self.requests_total),
                request_errors_total=float(self.errors_total),
                **self._spec_counters(),
                **self._pd_gauges(),
            )
            self._server.append(sample)
            self._engine_samples.append(EngineSample(self.engine_index, sample, self._lora_state()))
            if self._gpu_telemetry:
                self._gpu.extend(
                    gpu_samples(
                        ts=ts,
                        instance=self.name,
                        profile=self.profile,
                        busy=busy,
                        interval_s=self._interval,
                        fx=fx,
                        counters=self._gpu_counters,
                        first_index=self.engine_index * self.profile.tensor_parallel,
                    )
                )
            self._next_sample += self._interval

    def _lora_state(self) -> LoraState | None:
        if self.lora is None:
            return None
        waiting = {r.adapter for r in self._waiting if r.adapter}
        return LoraState(
            tuple(sorted(self._lora_running)), tuple(sorted(waiting)), self.lora.max_lora
        )

    def _spec_counters(self) -> dict[str, Any]:
        if self.speculative is None:
            return {}
        drafts, draft_tokens, accepted = self.spec_totals
        return {
            "spec_drafts_total": drafts,
            "spec_draft_tokens_total": draft_tokens,
            "spec_accepted_tokens_total": accepted,
        }

    def _pd_gauges(self) -> dict[str, Any]:
        if self.role != "decode":
            return {}
        return {
            "requests_deferred": float(len(self._deferred)),
            "kv_transfer_tokens_total": float(self.kv_transfer_tokens_total),
        }

    def drain(self) -> Batch:
        """Everything produced since the last drain."""
        batch = Batch(
            tuple(self._completions),
            tuple(self._server),
            tuple(self._gpu),
            tuple(self._engine_samples),
        )
        self._completions.clear()
        self._server.clear()
        self._engine_samples.clear()
        self._gpu.clear()
        return batch
