"""The stock pipecat / LiveKit plugin drivers (run in their own venv). A regular package, not a namespace one: a
namespace package loses to any plugins.py on sys.path (bench/plugins.py, which tests/bench puts there)."""
