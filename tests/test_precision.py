"""On a CPU without native bf16 nothing computes in bf16: the probe's override forces "not native" (whatever this CPU
has), and every matrix product and attention of the target's forward (regeneration's decoder, feature extraction,
speculative decoding) and of a training run with Muon and `amp: auto` is watched op by op."""
import logging
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from dflash_nb.precision import NATIVE_ENV, _WARNED, amp_dtype, choose_dtype, probe
from test_train import Rows, tiny_drafter, tiny_head

LOW = (torch.bfloat16, torch.float16)
COMPUTE = ('mm', 'addmm', 'bmm', 'baddbmm', 'matmul', 'linear', 'convolution', 'scaled_dot_product', 'flash_attention')


class LowPrecisionOps(TorchDispatchMode):
    "Counts the matrix products and attention calls (by op name) that get a bf16 or fp16 tensor."
    def __init__(self): super().__init__(); self.seen = {}
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if any(c in name for c in COMPUTE) and any(isinstance(a, torch.Tensor) and a.dtype in LOW for a in tree_leaves((args, kwargs))):
            self.seen[name] = self.seen.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@pytest.fixture
def no_bf16(monkeypatch):
    monkeypatch.setenv(NATIVE_ENV, '0')


def test_probe_is_quick_and_names_the_cpu():
    p = probe('cpu')
    assert p['seconds'] < 1.0, p['seconds']
    assert p['machine']['name'] and 'capability' in p['machine'] and set(p['gflops']) == {'float32', 'bfloat16', 'float16'}


def test_choices_without_native_bf16(no_bf16, caplog):
    assert choose_dtype('auto') == 'float32' and choose_dtype(None) == 'float32' and amp_dtype('auto') is None
    _WARNED.clear()
    with caplog.at_level(logging.WARNING, logger='dflash_nb'):
        assert choose_dtype('bfloat16') == 'bfloat16' and choose_dtype('bfloat16') == 'bfloat16'   # obeyed ...
    assert sum('bfloat16 is emulated' in r.getMessage() for r in caplog.records) == 1            # ... warned once


def _train(opt: str, amp: str, tmp_path):
    from dflash_nb.optimizers import Muon
    from dflash_nb.train import Trainer, TrainConfig
    emb, head = tiny_head()
    tc = TrainConfig(epochs=1, batch_size=2, num_anchors=3, optimizer=opt, amp=amp, log_every=2, ckpt_every=0,
                     max_steps=3, max_minutes=None, gamma=None, loss_slots=None)
    tr = Trainer(tiny_drafter(), emb, head, Rows(8), tc, out_dir=tmp_path, log=lambda m: None)
    with LowPrecisionOps() as mode: tr.fit()
    return tr, mode.seen, [o.ns_dtype for o in tr.opts if isinstance(o, Muon)]


def test_training_with_muon_never_computes_in_bf16(no_bf16, tmp_path):
    tr, seen, ns = _train('muon', 'auto', tmp_path)
    assert tr.step == 3 and not tr.amp and ns == [torch.float32]
    assert seen == {}, seen


def test_the_watch_sees_bf16_when_it_is_used(monkeypatch, tmp_path):
    "The control: the same run forced to bf16 autocast and forced-native bf16 (Muon's iteration) is seen computing in bf16."
    monkeypatch.setenv(NATIVE_ENV, '1')
    tr, seen, ns = _train('muon', 'bf16', tmp_path)
    assert tr.amp and ns == [torch.bfloat16] and seen.get('mm', 0) + seen.get('addmm', 0) > 0, seen


def test_target_paths_never_compute_in_bf16(no_bf16):
    from dflash_nb.evaluate import DFlashDraftSession, plain_generate, speculative_generate
    from dflash_nb.drafter import DFlashDrafter, build_config
    from dflash_nb.features import extract_features
    from dflash_nb.models import load_target
    from dflash_nb.decoding import greedy_decode
    model, tok = load_target('tiny-qwen3', dtype='auto')
    assert model.dtype == torch.float32
    cfg = build_config(model.config, mask_token_id=model.config.vocab_size - 1, num_hidden_layers=1, block_size=4,
                       target_layer_ids=[0, 1])
    d = DFlashDrafter(cfg).init_weights(0).eval()
    prompt = tok('Write a short poem about the sea')['input_ids']
    with LowPrecisionOps() as mode:
        greedy_decode(model, [prompt, prompt[:5]], tok.pad_token_id or 0, [], 4)                # regeneration's decoder
        extract_features(model, torch.tensor([prompt]), [0, 1])                                 # hidden states
        plain = plain_generate(model, prompt, 6)                                                 # evaluation
        spec = speculative_generate(model, DFlashDraftSession(d, model.get_input_embeddings(), model.get_output_embeddings()), prompt, 6)
    assert spec.tokens == plain.tokens
    assert mode.seen == {}, mode.seen
