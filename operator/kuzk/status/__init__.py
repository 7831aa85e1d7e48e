"""The kuzk status server: one truthful screen for the whole proving fleet.

``objects`` turns API objects into the few fields the screen needs, ``history`` remembers what
the watches have seen happen (state transitions, GPU time), ``aggregate`` is the pure function
from both and a clock to the status document (its fields typed in ``document``), ``view``
holds the current objects and the counts (the objects' and the ledger's, ``contract.ledger``),
``fragments`` keeps each job's line of the document serialized and assembles answers from a
moment of the view, ``answers`` makes those moments and keeps each query's answer (``query``:
a request's parameters and its ``continue`` token), ``watches`` keep the view current (list,
then watch), ``metrics`` exposes the view to Prometheus and ``app`` serves it all over HTTP.
Nothing here imports the operator's handlers or controller: the server runs, scales and
restarts on its own.
"""
