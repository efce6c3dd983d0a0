"""Write a random-weight OmniVoice checkpoint directory in the released layout (thin CLI over
realtime_tts.model.checkpoint.build_random_checkpoint).

    python bench/make_checkpoint.py OUT_DIR [--size tiny|full] [--seed 0] [--tokenizer bytes] [--device cuda]
"""

from __future__ import annotations

import argparse
import json

from realtime_tts.model.checkpoint import build_random_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--size", choices=["tiny", "full"], default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", choices=["bytes", "qwen"], default="bytes")
    parser.add_argument("--device", default=None, help="where random tensors are drawn (cuda is faster at full size)")
    args = parser.parse_args()
    info = build_random_checkpoint(args.out_dir, size=args.size, seed=args.seed, tokenizer=args.tokenizer,
                                   device=args.device)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
