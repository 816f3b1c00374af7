#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py on a folder that has no tokenizer (random-weight
benchmark folders, benches/make_hf_random.py): every model class's set_vocab is replaced by one
(and every base class's, which some call up to) that writes vocab type "none" with the config's vocabulary size, which is all llama-bench needs
(it feeds random token ids). Tensors are converted exactly as the converter converts a released
checkpoint.

Usage: hf_to_gguf.py LLAMA_CPP_DIR [convert_hf_to_gguf.py's arguments...]
"""
import sys


def main():
    lcpp = sys.argv[1]
    sys.path.insert(0, lcpp)
    sys.path.insert(1, lcpp + "/gguf-py")
    import convert_hf_to_gguf as conv  # noqa: E402
    from conversion.base import ModelBase  # noqa: E402

    def no_vocab(self):
        self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])
        self.gguf_writer.add_tokenizer_model("none")

    todo = [ModelBase]  # every model class, registered or a base a registered one calls up to
    while todo:
        cls = todo.pop()
        cls.set_vocab = no_vocab
        todo += cls.__subclasses__()
    sys.argv = [lcpp + "/convert_hf_to_gguf.py"] + sys.argv[2:]
    conv.main()


if __name__ == "__main__":
    main()
