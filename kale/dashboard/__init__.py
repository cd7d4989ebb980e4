"""The operator dashboard: a read-only FastAPI app over the controller's state directory.

``kale.dashboard.app.create_app(state_dir=..., sim_results=[...])`` builds it; ``kale
dashboard`` serves it on 127.0.0.1; ``kale demo`` serves it next to a live controller.
Layers: :mod:`.data` turns the timeline and status files into JSON shapes (pure, tested
without HTTP), :mod:`.api` maps them to GET routes, :mod:`.app` assembles the app and its
static page, :mod:`.server` runs uvicorn in a thread (demo, tests). This file imports none of
them, so importing one module never drags in the others.
"""
