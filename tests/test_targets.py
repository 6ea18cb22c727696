"Target loading: local folders, hub ids, the offline built-ins and their hidden_states layout."
import shutil
import pytest, torch
from dflash_nb.models import load_target, resolve_target, hidden_states_layout, ensure_tiny

def test_local_folder_and_hub_id(tmp_path):
    src = ensure_tiny('tiny-qwen3')
    dst = tmp_path / 'my-model'; shutil.copytree(src, dst)
    m, tok = load_target(str(dst))
    m0, _ = load_target('tiny-qwen3')
    ids = torch.tensor([tok('hello world')['input_ids']])
    with torch.inference_mode(): assert torch.equal(m(ids).logits, m0(ids).logits)
    assert resolve_target('Qwen/Qwen3.6-27B') == 'Qwen/Qwen3.6-27B'   # a hub id passes through to from_pretrained
    with pytest.raises(FileNotFoundError, match='neither config.json'):
        (tmp_path / 'empty').mkdir(); resolve_target(str(tmp_path / 'empty'))

def test_tiny_seeds_differ():
    a, _ = load_target('tiny-qwen3'); b, _ = load_target('tiny-qwen3:1')
    assert not torch.equal(a.lm_head.weight, b.lm_head.weight)

@pytest.mark.parametrize('spec', ['tiny-qwen3', 'tiny-qwen3_5', 'smollm2'])
def test_hidden_states_layout(spec):
    m, tok = load_target(spec)
    lay = hidden_states_layout(m, torch.tensor([tok('a test sentence')['input_ids']]))
    assert lay['n_hidden_states'] == lay['n_layers'] + 1
    assert lay['index0_is_embeddings'] and lay['layer_outputs_match'] and lay['last_is_final_norm']
    assert not lay['last_is_raw_last_layer']

def test_smollm2_is_the_real_model():
    m, tok = load_target('smollm2')
    assert (m.config.num_hidden_layers, m.config.hidden_size, m.config.model_type) == (30, 576, 'llama')
    msgs = [{'role': 'user', 'content': 'What is the capital of France?'}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors='pt', return_dict=True)['input_ids']
    out = m.generate(ids, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert 'Paris' in text, text
