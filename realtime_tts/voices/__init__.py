"""Voices: the saved-voice library on disk (store), the named presets of every engine (presets), reference
recordings made ready for cloning (reference) and the choice of a request's voice (select).

Web-process code: numpy and the package's leaves only, never torch.
"""
