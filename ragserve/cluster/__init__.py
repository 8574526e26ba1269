"""ragserve on Ray Serve: engine replicas behind one API (`ragserve serve --replicas N`).

Each API replica (deployment "api") runs the whole HTTP server — auth, limits, RAG, tokenizing
— over a RemoteEngine; each engine replica (deployment "engine") runs one engine. The router
between them (router.py) sends a prompt where its prefix is likely cached; what every replica
must see alike (per-user limits, engine stats, routing counts) lives in one actor
(shared_state.py); keys and documents are in the files or database they always are.
"""
