"""The MiniLM-shaped text model of precog-bench's gpu section (issue 33): a BERT
of all-MiniLM-L6-v2's shape (6 layers, 384 wide, 12 heads, 1536 intermediate)
with seeded random weights over the bench's tokenizer.json vocabulary.

usage:
  minilm.py export TOKENIZER.json DIR
      writes DIR/minilm.onnx (inputs input_ids, attention_mask, token_type_ids
      [batch, seq] int64; output last_hidden_state [batch, seq, 384]) and
      DIR/minilm.pt (the same weights, for the loop below)
  minilm.py run DIR TOKENIZER.json DATA_DIR MAX_LEN BATCH fp32|tf32|fp16 [PRECOG_OUT]
      the PyTorch loop end to end on cuda:0, as a PyTorch user would write it:
      tokenize every title, sort all of them by token length, run batches
      padded to their longest row, mean-pool over the mask and l2-normalize
      on the GPU, copy [N, 384] back (timed twice, the second kept). With
      PRECOG_OUT (precog's Parquet output of the same titles: id, embedding),
      also the least cosine between its vectors and precog's, by id.
Prints one JSON line."""
import glob, json, sys, time

import numpy as np
import pyarrow.parquet as pq
import torch
from tokenizers import Tokenizer
from transformers import BertConfig, BertModel


def build(vocab, eager):
    torch.manual_seed(1234)
    cfg = BertConfig(vocab_size=vocab, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                     intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2)
    if eager:
        cfg._attn_implementation = "eager"  # plain ops for the ONNX export
    return BertModel(cfg, add_pooling_layer=False).eval()


class LastHidden(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state


def export(tok_path, out):
    vocab = Tokenizer.from_file(tok_path).get_vocab_size()
    m = build(vocab, True)
    torch.save(m.state_dict(), out + "/minilm.pt")
    ids = torch.ones((2, 8), dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]}
    with torch.no_grad():
        torch.onnx.export(LastHidden(m), (ids, torch.ones_like(ids), torch.zeros_like(ids)), out + "/minilm.onnx",
                          input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    print(json.dumps({"onnx": out + "/minilm.onnx", "vocab": vocab}))


def titles_of(data_dir):
    ids, titles = [], []
    for f in sorted(glob.glob(data_dir + "/*.parquet")):
        t = pq.read_table(f, columns=["id", "title"])
        ids += t.column("id").to_pylist()
        titles += t.column("title").to_pylist()
    return ids, titles


def run(d, tok_path, data_dir, max_len, batch, precision, precog_out):
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    dev = torch.device("cuda:0")
    tok = Tokenizer.from_file(tok_path)
    tok.enable_truncation(max_len)
    tok.no_padding()
    m = build(tok.get_vocab_size(), False)
    m.load_state_dict(torch.load(d + "/minilm.pt"))
    m = m.to(dev)
    if precision == "fp16":
        m = m.half()
    keys, titles = titles_of(data_dir)
    out = torch.empty((len(titles), 384), dtype=torch.float32, pin_memory=True)

    def once():
        t0 = time.perf_counter()
        ids = [e.ids for e in tok.encode_batch(titles)]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        with torch.inference_mode():
            for lo in range(0, len(order), batch):
                idx = order[lo:lo + batch]
                T = len(ids[idx[-1]])
                a = np.zeros((len(idx), T), np.int64)
                msk = np.zeros((len(idx), T), np.int64)
                for j, i in enumerate(idx):
                    a[j, :len(ids[i])] = ids[i]
                    msk[j, :len(ids[i])] = 1
                ta = torch.from_numpy(a).to(dev, non_blocking=True)
                tm = torch.from_numpy(msk).to(dev, non_blocking=True)
                h = m(input_ids=ta, attention_mask=tm, token_type_ids=torch.zeros_like(ta)).last_hidden_state.float()
                mf = tm.unsqueeze(-1).float()
                pooled = (h * mf).sum(1) / mf.sum(1).clamp(min=1)
                pooled = torch.nn.functional.normalize(pooled, dim=1)
                out[torch.tensor(idx)] = pooled.cpu()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    once()  # warm-up: kernels, allocator
    dt = once()
    res = {"rows": len(titles), "seconds": dt, "rows_per_s": len(titles) / dt, "precision": precision}
    if precog_out:
        mine = {k: i for i, k in enumerate(keys)}
        least, n = 1.0, 0
        for f in sorted(glob.glob(precog_out + "/*.parquet")):
            t = pq.read_table(f, columns=["id", "embedding"])
            for k, v in zip(t.column("id").to_pylist(), t.column("embedding").to_pylist()):
                a = np.asarray(v, np.float64)
                b = out[mine[k]].numpy().astype(np.float64)
                least = min(least, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)))
                n += 1
        res["compared"] = n
        res["min_cosine"] = least
    print(json.dumps(res))


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7],
            sys.argv[8] if len(sys.argv) > 8 else "")
