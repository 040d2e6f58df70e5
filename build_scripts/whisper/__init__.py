"""Whisper build: import a checkpoint (CTranslate2, Hugging Face, OpenAI), export ONNX, build TensorRT plans.

checkpoint.py   the canonical in-memory form every importer produces
ct2.py          CTranslate2 / faster-whisper folder (``model.bin``)
hf.py           Hugging Face transformers folder (``save_pretrained``)
openai.py       OpenAI ``.pt`` checkpoint
modules.py      thin torch modules over the canonical weights (export only)
export.py       ONNX encoder and KV-cache decoder, fp32 / fp16 / int8
tensorrt.py     TensorRT plans from the ONNX files (on the device)
step.py         the bundle build step
"""
