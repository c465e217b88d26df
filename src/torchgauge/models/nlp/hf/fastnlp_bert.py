"""fastNLP's BERT question answering on a simulated CMRC2018 set: TorchBench's ``fastNLP_Bert``.

Paper: Devlin et al., BERT, 2019; task: Cui et al., CMRC 2018 (span extraction, Chinese).
TorchBench builds fastNLP's ``BertForQuestionAnswering``: a ``BertEmbedding`` (BERT-base with
the ``bert_config.json`` shipped beside it: 12 layers of width 768, vocabulary 21,128) and a
768 -> 2 linear head scoring each token as answer start or end. The network here is the same
BERT-base (Hugging Face transformers ``BertModel``, Apache-2.0, random-initialised) with that head.

TorchBench's simulated data fixes the shapes: every context is 457 characters and every question
16, joined by ``CMRC2018BertPipe`` as context ``[SEP]`` question into 474 words, the loss
restricted to the context and every answer spanning characters 0 to 7 (the simulator puts each
8-character answer at ``answer_start`` 0). fastNLP's ``BertEmbedding`` (word dropout 0.01 in
training, ``[UNK]`` in place of the dropped words) wraps the words in ``[CLS]`` ... ``[SEP]``, so
BERT runs on 476 word pieces with segment ids 0 up to the first ``[SEP]`` and 1 after it, and an
all-ones attention mask; it computes BERT's pooler too (unused), keeps the 474 word positions
(``include_cls_sep=False``; one piece per character) and applies dropout 0.5 before the head.

Its timed step walks its whole prefetched data set. In training that is 5 questions per context
over ``batch`` contexts in mini-batches of ``batch`` (6 by default: 5 mini-batches of 6 samples),
each a forward, the CMRC2018 start/end cross-entropy (``-inf`` outside the context) and a
backward. fastNLP's trainer, which TorchBench slices, zeroes gradients at the first mini-batch
and steps the optimizer only every ``update_every = 10`` mini-batches (``_grad_backward`` /
``_update``), and the clipping and warm-up callbacks act on the same cadence: with 5 mini-batches
per step, gradients accumulate and the AdamW step, clipping and warm-up never run. We time
exactly that (and so the weights do not change in training). In eval: 4 questions for 1 context,
one sample per forward (4 forwards).

Parameters: fastNLP 0.6.0 (TorchBench's pinned version, patched to build ``BertModel`` from the
config) keeps BERT's whole 21,128-row word embedding (the word-piece trimming of older fastNLP
releases is gone: ``_BertWordModel`` only maps words to pieces) and its pooler: 102,269,186, as
here. As fastNLP, each forward reads the longest sample's length back, copies the words to the
host and writes each sample's pieces back to the device (here the words are already piece ids).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ....registry import register_model
from ....workload import BuildContext, Workload
from .factory import ATTN_IMPLEMENTATION, HF_PRELOAD, import_transformers

BERT_BASE_CHINESE = {  # TorchBench's fastNLP_Bert/bert_config.json
    "vocab_size": 21128,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}
SMOKE = {**BERT_BASE_CHINESE, "vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 64}  # fmt: skip
QUESTION_LEN, CONTEXT_LEN = 16, 457  # the simulator's query_length 15 and context_length 456, plus one
ANSWER_LEN = 8  # answers_length 7, plus one, at answer_start 0
PAD, UNK, CLS, SEP = 0, 100, 101, 102  # BERT's special word pieces (bert-base-chinese ids)
FIRST_WORD_PIECE = 103  # words are drawn above the specials
WORD_DROPOUT, EMBEDDING_DROPOUT = 0.01, 0.5  # TorchBench's BertEmbedding(word_dropout=0.01, dropout=0.5)
QUESTIONS_PER_CONTEXT = {"train": 5, "eval": 4}  # the simulator's qas_size
SPLIT_BATCH = {"train": None, "eval": 1}  # eval: DataSetIter over the dev set at batch 1


class BertForQuestionAnswering(nn.Module):
    """Tokens ``(B, T)`` -> start and end logits ``(B, T)`` each."""

    def __init__(self, encoder: nn.Module, hidden: int) -> None:
        super().__init__()
        self.encoder = encoder  # BERT with its pooler
        self.qa_classifier = nn.Linear(hidden, 2)
        self.dropout = nn.Dropout(EMBEDDING_DROPOUT)

    def forward(self, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.training:  # fastNLP's drop_word: a word (not [SEP]) becomes [UNK] with probability 0.01
            with torch.no_grad():
                dropped = torch.bernoulli(torch.full_like(words, WORD_DROPOUT, dtype=torch.float)).eq(1)
                words = words.masked_fill(dropped & words.ne(SEP), UNK)
        with torch.no_grad():  # [CLS] words [SEP]; segment 0 through the first [SEP], 1 after it
            # fastNLP reads the longest sample back, then maps words to pieces on the host, sample by sample
            longest = int(words.ne(PAD).sum(dim=-1).max().item())
            pieces = words.new_full((words.size(0), longest + 2), PAD)
            for i, row in enumerate(words.cpu().tolist()):  # one word piece per character here
                pieces[i, 1 : len(row) + 1] = torch.tensor(row)
            pieces[:, 0], pieces[:, longest + 1] = CLS, SEP
            seps_from_right = pieces.eq(SEP).long().flip(-1).cumsum(-1).flip(-1)
            segments = seps_from_right.fmod(2)
            segments = segments[:, :1] ^ segments
        out = self.encoder(input_ids=pieces, token_type_ids=segments, attention_mask=torch.ones_like(pieces))
        hidden = self.dropout(out.last_hidden_state[:, 1:-1])  # (B, T, H): the words' positions
        start, end = self.qa_classifier(hidden).unbind(-1)
        return start, end


class FastNLPBertWorkload(Workload):
    """One TorchBench step: every prefetched mini-batch once (5 backwards to train, 4 forwards to eval)."""

    needs_optimizer = False  # fastNLP's AdamW never steps within one TorchBench step (see above)
    updates_parameters = False  # training accumulates gradients only

    def train_step(self) -> torch.Tensor:
        self.module.zero_grad(set_to_none=True)  # (step - 1) % update_every == 0 at the first batch
        total = torch.zeros((), device=self.device)
        for words, context_mask, start, end in self.inputs:
            with self.autocast():
                start_logits, end_logits = self.module(words)
                # CMRC2018Loss: positions outside the context cannot be answers.
                start_logits = start_logits.masked_fill(~context_mask, float("-inf"))
                end_logits = end_logits.masked_fill(~context_mask, float("-inf"))
                loss = (F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2
            (loss if self.grad_scaler is None else self.grad_scaler.scale(loss)).backward()
            total = total + loss.detach()
        return total / len(self.inputs)

    def forward(self) -> Any:
        return [self.module(words) for words, *_ in self.inputs]


def _batches(ctx: BuildContext, vocab: int) -> list:
    """``(words, context_mask, start, end)`` per mini-batch, as the simulated CMRC2018 set gives them.

    Words are context ``[SEP]`` question; every answer spans context characters 0 to 7.
    """
    q_len, c_len = ctx.pick((QUESTION_LEN, CONTEXT_LEN), (4, 12))
    samples = ctx.batch_size * QUESTIONS_PER_CONTEXT[ctx.mode]
    per_batch = SPLIT_BATCH[ctx.mode] or ctx.batch_size
    seq = c_len + 1 + q_len  # context [SEP] question
    batches = []
    for first in range(0, samples, per_batch):
        n = min(per_batch, samples - first)
        words = ctx.randint(FIRST_WORD_PIECE, vocab, (n, seq))
        words[:, c_len] = SEP
        mask = torch.zeros(n, seq, dtype=torch.bool, device=ctx.device)
        mask[:, :c_len] = True
        start = torch.zeros(n, dtype=torch.long, device=ctx.device)
        batches.append((words, mask, start, start + ANSWER_LEN - 1))
    return batches


@register_model(
    domain="nlp", task="question_answering",
    source="Devlin et al., BERT, 2019; fastNLP BertForQuestionAnswering on simulated CMRC2018 (TorchBench)",
    batch_size=(6, 1), preload=HF_PRELOAD, tags=("hf",), param_count=102_269_186,
    notes="one step = TorchBench's whole prefetched set: 5 accumulated backwards of 6 x 474 tokens "
          "(no optimizer step, as fastNLP's update_every=10), or 4 forwards of 1",
)  # fmt: skip
def fastNLP_Bert(ctx: BuildContext, **overrides: Any) -> Workload:
    """BERT-base (Chinese vocabulary) + start/end head on 474-token question+context samples."""
    transformers = import_transformers()
    fields = {**(SMOKE if ctx.smoke else BERT_BASE_CHINESE), **overrides}
    config = transformers.BertConfig(**fields, attn_implementation=ATTN_IMPLEMENTATION)
    with torch.device(ctx.device):
        model = BertForQuestionAnswering(transformers.BertModel(config), config.hidden_size)
    return FastNLPBertWorkload(ctx, model, _batches(ctx, config.vocab_size))
