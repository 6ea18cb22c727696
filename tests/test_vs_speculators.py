"""Parity with speculators 0.9.0's DFlash model: the same weights fed the same packed batch (two documents, fixed
anchors) give the same draft hidden states, the same draft predictions, the same supervised positions and the same
labels (the target's argmax at position - 1) as our drafter, our mask and our stored target labels. speculators runs in
its own venv (tests/interop_venvs.py); the test skips when that venv cannot be built (no PyPI)."""
import json, sys
from pathlib import Path
import pytest, torch

sys.path.insert(0, str(Path(__file__).parent))
from interop_venvs import run_in, venv_python
from dflash_nb.drafter import DFlashDrafter, build_config, build_masks, export_drafter
from dflash_nb.loss import block_labels, slot_targets
from dflash_nb.features import extract_features, head_topk
from dflash_nb.models import load_target, resolve_target

# speculators' forward up to the logits, with its anchor sampler replaced by the test's anchors; CPU, sdpa attention
SPEC_FORWARD = r'''
import sys, torch
import speculators.models.dflash.core as core
from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
path, inp, out = sys.argv[1:4]
x = torch.load(inp, weights_only=True)
cfg = DFlashSpeculatorConfig.from_pretrained(path)
cfg.transformer_layer_config._attn_implementation = "sdpa"
m = DFlashDraftModel.from_pretrained(path, config=cfg).float().eval()
m.load_verifier_weights()
core.select_anchors = lambda loss_mask, n, block_size: (x["anchors"], torch.ones_like(x["anchors"], dtype=torch.bool))
with torch.no_grad():
    hidden, logits, targets, mask, idx = m._backbone_forward(x["features"], x["input_ids"], x["loss_mask"], x["last"],
                                                             x["document_ids"], max_anchors=len(x["anchors"]))
torch.save({"hidden": hidden, "pred": logits.argmax(-1), "target": targets.argmax(-1), "mask": mask, "idx": idx}, out)
print("JSONnull")
'''

CONVERT = r'''
import sys
from speculators.convert.dflash.converter import DFlashConverter
DFlashConverter().convert(sys.argv[1], sys.argv[2], base_model=sys.argv[3], validate=False)
print("JSONnull")
'''


def test_same_batch_same_weights_as_speculators(tmp_path):
    try: venv_python('spec09')
    except Exception as e: pytest.skip(f'the spec09 venv cannot be built here (pip/PyPI): {str(e)[:300]}')
    model, _ = load_target('tiny-qwen3')
    B, T = 4, 24
    cfg = build_config(model.config, mask_token_id=5, num_hidden_layers=2, block_size=B, target_layer_ids=[0, 1, 2])
    ours = DFlashDrafter(cfg).init_weights(3).eval()
    export_drafter(ours, tmp_path / 'ours', dtype='float32')
    run_in('spec09', CONVERT, tmp_path / 'ours', tmp_path / 'spec', resolve_target('tiny-qwen3'))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 600, (1, T), generator=g)
    lm = (torch.rand(1, T, generator=g) > 0.25).long(); lm[0, :2] = 0
    docs = torch.tensor([[0] * 10 + [1] * 14])                      # two rows packed into one sequence
    anchors = torch.tensor([3, 12, 16])                              # each block inside its own row
    feats, last = extract_features(model, ids, cfg.target_layer_ids, include_last=True)
    x = {'features': feats.flatten(2), 'input_ids': ids, 'loss_mask': lm, 'last': last, 'document_ids': docs, 'anchors': anchors}
    torch.save(x, tmp_path / 'in.pt')
    run_in('spec09', SPEC_FORWARD, tmp_path / 'spec', tmp_path / 'in.pt', tmp_path / 'out.pt')
    theirs = torch.load(tmp_path / 'out.pt', weights_only=True)
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    an, valid = anchors[None], torch.ones(1, 3, dtype=torch.bool)
    pos, labels, sup = block_labels(ids, lm, an, valid, B)
    block = torch.full_like(labels, cfg.mask_token_id); block[..., 0] = ids.gather(1, an)
    with torch.no_grad():
        h = ours(emb(block.view(1, -1)), feats, torch.arange(T)[None], pos.view(1, -1), build_masks(cfg, an, T, docs))
    assert torch.equal(theirs['idx'], pos.view(-1))                                    # the same block positions
    torch.testing.assert_close(theirs['hidden'], h, rtol=1e-4, atol=1e-4)             # the same draft outputs
    assert torch.equal(theirs['pred'], head(h).argmax(-1))
    assert torch.equal(theirs['mask'].bool(), sup.view(1, -1))                         # the same supervised slots
    tgt = slot_targets(pos, sup[:, :, 1:], head_topk(model, last, 2)[0][..., 0])     # our stored-label path
    assert torch.equal(theirs['target'].view(1, 3, B)[:, :, 1:][sup[:, :, 1:]], tgt)  # the same labels
    assert sup.sum() >= 5 and not sup.all()
