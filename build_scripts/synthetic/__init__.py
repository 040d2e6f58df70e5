"""Random-weight models with the real models' shapes, for machines the real weights cannot reach.

A GGUF *layout* is everything in a GGUF but the weights (metadata, vocabulary, chat template, each
tensor's name, shape and type): a few MB instead of a GB. ``write_random_gguf`` makes a file from it
that llama.cpp loads and runs exactly as it runs the real model (same kernels, same memory, same
speed); only the words are noise. ``random_whisper`` does the same for a Whisper checkpoint.
"""
