"""Benchmarks for the course's attention implementations: ``make bench`` runs ``python -m benchmarks.run``.

* ``variants``: multi-head attention written eight ways, forward and forward+backward.
* ``decoder``: a small GPT-style decoder, greedy decoding without a cache, with a growing and a preallocated
  KV cache, and the cache memory of MHA / GQA / MQA.
* ``run``: the configurations, the measurements and the JSON in ``benchmarks/results/<device>.json``.
"""
