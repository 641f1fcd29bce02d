"""The PyTorch loops precog-bench's gpu section compares the text jobs with, end
to end on cuda:0 as a PyTorch user would write them: tokenize every title
(tokenizer.json), sort all of them by token length, run batches padded to their
longest row, mean-pool over the mask and l2-normalize on the GPU, copy [N, D]
back (timed twice, the second kept). Prints one JSON line: rows, seconds,
rows_per_s, precision (and with PRECOG_OUT, precog's Parquet output of the same
titles (id, embedding), compared and min_cosine: the least cosine between its
vectors and these, by id).

usage:
  torchloop.py embedder MODEL.onnx TOKENIZER.json DATA_DIR MAX_LEN BATCH fp32|tf32
      the text section's text_embedder, its weights read from the ONNX file
  torchloop.py minilm-export TOKENIZER.json DIR
      a BERT of all-MiniLM-L6-v2's shape (6 layers, 384 wide, 12 heads, 1536
      intermediate), seeded random weights over the tokenizer's vocabulary:
      DIR/minilm.onnx (inputs input_ids, attention_mask, token_type_ids
      [batch, seq] int64; output last_hidden_state) and DIR/minilm.pt
  torchloop.py minilm DIR TOKENIZER.json DATA_DIR MAX_LEN BATCH fp32|tf32|fp16 [PRECOG_OUT]
      that BERT, from DIR/minilm.pt"""
import glob, json, sys, time

import numpy as np
import pyarrow.parquet as pq
import torch
from tokenizers import Tokenizer

DEV = torch.device("cuda:0")


def titles_of(data_dir):
    keys, titles = [], []
    for f in sorted(glob.glob(data_dir + "/**/*.parquet", recursive=True)):
        t = pq.read_table(f, columns=["id", "title"])
        keys += t.column("id").to_pylist()
        titles += t.column("title").to_pylist()
    return keys, titles


def tokenizer(path, max_len):
    tok = Tokenizer.from_file(path)
    tok.enable_truncation(max_len)
    tok.no_padding()
    return tok


def loop(hidden, tok, titles, batch, dim):
    """hidden(ids, mask) is the model's per-token output [B, T, dim]."""
    out = torch.empty((len(titles), dim), dtype=torch.float32, pin_memory=True)

    def once():
        t0 = time.perf_counter()
        ids = [e.ids for e in tok.encode_batch(titles)]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        with torch.inference_mode():
            for lo in range(0, len(order), batch):
                idx = order[lo:lo + batch]
                T = len(ids[idx[-1]])
                a = np.zeros((len(idx), T), np.int64)
                m = np.zeros((len(idx), T), np.int64)
                for j, i in enumerate(idx):
                    a[j, :len(ids[i])] = ids[i]
                    m[j, :len(ids[i])] = 1
                ta = torch.from_numpy(a).to(DEV, non_blocking=True)
                tm = torch.from_numpy(m).to(DEV, non_blocking=True)
                mf = tm.unsqueeze(-1).float()
                pooled = (hidden(ta, tm).float() * mf).sum(1) / mf.sum(1).clamp(min=1)
                out[torch.tensor(idx)] = torch.nn.functional.normalize(pooled, dim=1).cpu()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    once()  # warm-up: kernels, allocator
    return once(), out


def compare(keys, out, precog_out):
    row = {k: i for i, k in enumerate(keys)}
    least, n = 1.0, 0
    for f in sorted(glob.glob(precog_out + "/*.parquet")):
        t = pq.read_table(f, columns=["id", "embedding"])
        for k, v in zip(t.column("id").to_pylist(), t.column("embedding").to_pylist()):
            a = np.asarray(v, np.float64)
            b = out[row[k]].numpy().astype(np.float64)
            least = min(least, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)))
            n += 1
    return {"compared": n, "min_cosine": least}


def report(keys, titles, dt, out, precision, precog_out):
    res = {"rows": len(titles), "seconds": dt, "rows_per_s": len(titles) / dt, "precision": precision}
    if precog_out:
        res.update(compare(keys, out, precog_out))
    print(json.dumps(res))


def set_precision(precision):
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


def embedder(model_path, tok_path, data_dir, max_len, batch, precision):
    import onnx
    from onnx import numpy_helper
    set_precision(precision)
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model_path).graph.initializer}
    emb, w, b = (torch.from_numpy(init[n]).to(DEV) for n in ("emb", "w", "b"))
    keys, titles = titles_of(data_dir)
    dt, out = loop(lambda ids, mask: torch.tanh(emb[ids] @ w + b), tokenizer(tok_path, max_len), titles, batch, w.shape[1])
    report(keys, titles, dt, out, precision, "")


def bert(vocab, eager):
    from transformers import BertConfig, BertModel
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


def minilm_export(tok_path, d):
    vocab = Tokenizer.from_file(tok_path).get_vocab_size()
    m = bert(vocab, True)
    torch.save(m.state_dict(), d + "/minilm.pt")
    ids = torch.ones((2, 8), dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]}
    with torch.no_grad():
        torch.onnx.export(LastHidden(m), (ids, torch.ones_like(ids), torch.zeros_like(ids)), d + "/minilm.onnx",
                          input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    print(json.dumps({"onnx": d + "/minilm.onnx", "vocab": vocab}))


def minilm(d, tok_path, data_dir, max_len, batch, precision, precog_out):
    set_precision(precision)
    tok = tokenizer(tok_path, max_len)
    m = bert(tok.get_vocab_size(), False)
    m.load_state_dict(torch.load(d + "/minilm.pt"))
    m = m.to(DEV)
    if precision == "fp16":
        m = m.half()
    keys, titles = titles_of(data_dir)
    hidden = lambda ids, mask: m(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
    dt, out = loop(hidden, tok, titles, batch, 384)
    report(keys, titles, dt, out, precision, precog_out)


if __name__ == "__main__":
    a = sys.argv
    if a[1] == "embedder":
        embedder(a[2], a[3], a[4], int(a[5]), int(a[6]), a[7])
    elif a[1] == "minilm-export":
        minilm_export(a[2], a[3])
    else:
        minilm(a[2], a[3], a[4], int(a[5]), int(a[6]), a[7], a[8] if len(a) > 8 else "")
