"""The PyTorch loop the gpu section of precog-bench compares the text job with:
the same text_embedder (its weights read from the ONNX file), the same titles
(read from the job's Parquet) and tokenizer.json, end to end on cuda:0:
tokenize every title, sort all of them by token length, run batches padded to
their longest row, mean-pool over the mask and l2-normalize on the GPU, copy
[N, D] back. Prints one JSON line: rows, seconds, rows_per_s, precision.
usage: torchloop.py MODEL.onnx TOKENIZER.json DATA_DIR MAX_LEN BATCH fp32|tf32"""
import glob, json, sys, time

import numpy as np
import onnx
import pyarrow.parquet as pq
import torch
from onnx import numpy_helper
from tokenizers import Tokenizer

model_path, tok_path, data_dir = sys.argv[1], sys.argv[2], sys.argv[3]
max_len, batch, precision = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
dev = torch.device("cuda:0")
init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model_path).graph.initializer}
emb = torch.from_numpy(init["emb"]).to(dev)
w = torch.from_numpy(init["w"]).to(dev)
b = torch.from_numpy(init["b"]).to(dev)
titles = []
for f in sorted(glob.glob(data_dir + "/**/*.parquet", recursive=True)):
    titles += pq.read_table(f, columns=["title"]).column("title").to_pylist()
tok = Tokenizer.from_file(tok_path)
tok.enable_truncation(max_len)
tok.no_padding()


def run():
    t0 = time.perf_counter()
    ids = [e.ids for e in tok.encode_batch(titles)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = torch.empty((len(ids), w.shape[1]), dtype=torch.float32, pin_memory=True)
    with torch.inference_mode():
        for lo in range(0, len(order), batch):
            idx = order[lo:lo + batch]
            T = len(ids[idx[-1]])
            a = np.zeros((len(idx), T), np.int64)
            m = np.zeros((len(idx), T), np.float32)
            for j, i in enumerate(idx):
                a[j, :len(ids[i])] = ids[i]
                m[j, :len(ids[i])] = 1
            ta = torch.from_numpy(a).to(dev, non_blocking=True)
            tm = torch.from_numpy(m).to(dev, non_blocking=True)
            h = torch.tanh(emb[ta] @ w + b) * tm.unsqueeze(-1)
            pooled = h.sum(1) / tm.sum(1, keepdim=True).clamp(min=1)
            pooled = torch.nn.functional.normalize(pooled, dim=1)
            out[torch.tensor(idx)] = pooled.cpu()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


run()  # warm-up: kernels, allocator
dt = run()
print(json.dumps({"rows": len(titles), "seconds": dt, "rows_per_s": len(titles) / dt, "precision": precision}))
