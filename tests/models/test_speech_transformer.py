"""speech_transformer's eval is the reference's beam search (kaituoxu/Speech-Transformer ``recognize_beam``).

Checked against a brute-force search on a tiny random model (two steps, where a beam as wide as
the vocabulary is exhaustive) and against hand-worked cases on a decoder stub whose next-id
probabilities are a lookup table: <eos> leaves the beam for good, the beam is not refilled,
decoding stops when no hypothesis is left, the last step appends <eos>, ``decode_max_len`` 0
bounds the steps by the encoder frames, and ``nbest`` returns the best finished ones in order.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torchgauge
from torchgauge.models.speech.speech_transformer import BeamSearch, SpeechTransformer

A, B, C, SOS, EOS = range(5)  # a five-symbol dictionary: three characters, then <sos>, <eos>
# Next-id probabilities after each prefix (ids a, b, c, <sos>, <eos>); unlisted prefixes use DEFAULT.
TABLE = {
    (SOS,): (0.5, 0.3, 0.05, 0.05, 0.1),
    (SOS, A): (0.2, 0.1, 0.05, 0.05, 0.6),
    (SOS, B): (0.3, 0.22, 0.15, 0.15, 0.18),
    (SOS, A, A): (0.25, 0.15, 0.15, 0.1, 0.35),
}
DEFAULT = (0.4, 0.3, 0.1, 0.1, 0.1)


def _tiny_model(vocab_size: int = 5) -> SpeechTransformer:
    torch.manual_seed(0)
    model = SpeechTransformer(
        d_input=8, vocab_size=vocab_size, d_model=16, d_inner=32, n_layers_enc=1, n_layers_dec=1, n_head=2, d_k=8, d_v=8
    )
    return model.eval()


def _table_model() -> SpeechTransformer:
    """A tiny model whose decoder is replaced by TABLE (logits = log-probabilities)."""
    model = _tiny_model()

    def decode(ys_in, memory, memory_mask, ys_valid=None):
        probs = torch.tensor(TABLE.get(tuple(ys_in[0].tolist()), DEFAULT))
        return probs.log().expand(1, ys_in.size(1), -1)

    model.decode = decode
    return model


def _search(model: SpeechTransformer, frames: int, **settings) -> object:
    with torch.inference_mode():
        return model.beam_search(torch.zeros(1, frames, 16), BeamSearch(**settings))


def test_beam_search_over_two_steps_matches_brute_force() -> None:
    model = _tiny_model(vocab_size=6)  # ids 0..3, <sos> 4, <eos> 5
    sos, eos, vocab = model.sos_id, model.eos_id, 6
    with torch.inference_mode():
        memory, _ = model.encode(torch.randn(1, 7, 8), torch.tensor([7], dtype=torch.int32))
        # A beam as wide as the vocabulary keeps every first id and the best `vocab` of all
        # two-id continuations, so the best finished hypotheses are those of an exhaustive search.
        result = model.beam_search(memory, BeamSearch(beam_size=vocab, nbest=4, decode_max_len=2))

        def log_probs(prefix: list[int]) -> torch.Tensor:
            return F.log_softmax(model.decode(torch.tensor([prefix]), memory, None)[0, -1], dim=-1)

        first = log_probs([sos])
        finished = [([sos, eos], float(first[eos]))]  # ended after one step
        for t1 in range(vocab):
            if t1 != eos:
                second = log_probs([sos, t1])
                finished += [([sos, t1, t2, eos], float(first[t1] + second[t2])) for t2 in range(vocab)]
    expected = sorted(finished, key=lambda h: h[1], reverse=True)[:4]
    assert [h["yseq"] for h in result.nbest] == [seq for seq, _ in expected]
    assert [float(h["score"]) for h in result.nbest] == pytest.approx([s for _, s in expected], abs=1e-5)
    assert (result.steps, result.decoder_calls) == (2, 1 + (vocab - 1))  # <sos>, then every live first id


def test_eos_leaves_the_beam_which_is_not_refilled() -> None:
    result = _search(_table_model(), frames=9, beam_size=2, nbest=10, decode_max_len=4)
    # step 1: a (.5), b (.3); step 2: a<eos> (.30) ends, aa (.10) beats ba (.09) and lives alone;
    # step 3: aa<eos> (.035) ends, aaa (.025) lives; step 4 (the last): aaaa, aaab get <eos>.
    assert [h["yseq"] for h in result.nbest] == [
        [SOS, A, EOS],
        [SOS, A, A, EOS],
        [SOS, A, A, A, A, EOS],
        [SOS, A, A, A, B, EOS],
    ]
    expected = [0.5 * 0.6, 0.5 * 0.2 * 0.35, 0.5 * 0.2 * 0.25 * 0.4, 0.5 * 0.2 * 0.25 * 0.3]
    assert [float(h["score"]) for h in result.nbest] == pytest.approx([math.log(p) for p in expected], rel=1e-5)
    assert (result.steps, result.decoder_calls) == (4, 1 + 2 + 1 + 1)


def test_nbest_keeps_the_best_finished_hypotheses() -> None:
    result = _search(_table_model(), frames=9, beam_size=2, nbest=2, decode_max_len=4)
    assert [h["yseq"] for h in result.nbest] == [[SOS, A, EOS], [SOS, A, A, EOS]]


def test_decoding_stops_when_every_hypothesis_has_ended() -> None:
    table = dict(TABLE)
    table[(SOS, A)] = (0.1, 0.05, 0.05, 0.05, 0.75)
    table[(SOS, B)] = (0.05, 0.05, 0.05, 0.05, 0.8)
    model = _table_model()
    model.decode = lambda ys, memory, mask, valid=None: (
        torch.tensor(table.get(tuple(ys[0].tolist()), DEFAULT)).log().expand(1, ys.size(1), -1)
    )
    result = _search(model, frames=9, beam_size=2, nbest=2, decode_max_len=100)
    # step 2's best two are a<eos> (.375) and b<eos> (.24): nothing is left to decode
    assert (result.steps, result.decoder_calls) == (2, 3)
    assert [h["yseq"] for h in result.nbest] == [[SOS, A, EOS], [SOS, B, EOS]]


def test_decode_max_len_zero_bounds_the_steps_by_the_encoder_frames() -> None:
    result = _search(_table_model(), frames=2, beam_size=2, nbest=5, decode_max_len=0)
    # two steps: a<eos> (.30) and aa (.10) survive step 2, the last, which appends <eos> to both
    assert result.steps == 2
    assert [h["yseq"] for h in result.nbest] == [[SOS, A, EOS, EOS], [SOS, A, A, EOS]]


def test_a_beam_of_one_is_greedy() -> None:
    result = _search(_table_model(), frames=9, beam_size=1, nbest=1, decode_max_len=100)
    assert result.nbest[0]["yseq"] == [SOS, A, EOS] and (result.steps, result.decoder_calls) == (2, 2)


def test_eval_step_is_torchbench_recognize_on_one_utterance() -> None:
    w = torchgauge.create("speech_transformer", mode="eval", size="smoke")
    assert w.search == BeamSearch(beam_size=5, nbest=1, decode_max_len=4)  # full size: 100 steps
    ((feats, feat_len),) = w.inputs  # one utterance, unpadded, as the recognizer takes it
    assert feats.shape == (10, 320) and feat_len.dtype == torch.int32 and feat_len.tolist() == [10]
    (first,) = w.step()
    (again,) = w.step()
    # seeded random weights: the same search every step
    assert first.steps == again.steps and first.nbest[0]["yseq"] == again.nbest[0]["yseq"]
    assert len(first.nbest) == 1 and first.nbest[0]["yseq"][-1] == w.module.eos_id
    assert first.decoder_calls == 1 + 5 * (first.steps - 1)  # no hypothesis ended before the last step


def test_search_settings_are_model_args() -> None:
    w = torchgauge.create("speech_transformer", mode="eval", size="smoke", beam_size=2, decode_max_len=3)
    assert w.search == BeamSearch(beam_size=2, nbest=1, decode_max_len=3)
    (result,) = w.step()
    assert result.steps <= 3 and result.decoder_calls <= 1 + 2 * 2


def test_eval_batch_decodes_each_utterance_in_turn() -> None:
    w = torchgauge.create("speech_transformer", mode="eval", size="smoke", batch_size=3)
    assert [feats.shape[0] for feats, _ in w.inputs][0] == 10 and len(w.inputs) == 3
    assert len(w.step()) == 3
