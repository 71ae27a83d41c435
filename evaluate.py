"""Evaluate a VAT's sentence vectors on SentEval's tasks: the recipe `vat evaluate` runs,
top to bottom.

    python evaluate.py --model demo-wordnet-d64 --tasks STS12
    python evaluate.py --model runs/demo --tasks sts,MR --features layer0/sif/none --output r.json

Load the model once, choose its features, make its sentence encoder, run the tasks, print
the table. The numbers are `vat evaluate`'s for the same options (`vat evaluate` also
fine-tunes, plots, skips missing tasks and scores any Python or Hugging Face encoder;
docs/evaluate.md).
SentEval's data is found under --data-dir, else $VAT_SENTEVAL_DIR (docs/evaluate.md).
"""

import argparse
import sys
import time

from vat.cli.evaluate import format_table, json_safe
from vat.data.paths import default_senteval_dir
from vat.errors import run_cli
from vat.eval.encoders import vat_encoder
from vat.eval.engine import EvalSettings, evaluate
from vat.eval.task_scores import task_scores
from vat.eval.tasks.registry import choose_tasks
from vat.features.choice import features_for
from vat.io import check_output_file, write_json_atomic
from vat.runtime import resolve_device
from vat.share.resolve import load_model


def options(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python evaluate.py", description=__doc__.split("\n")[0])
    p.add_argument(
        "--model", required=True, help="a shipped name, run folder, .ckpt, folder or Hub id"
    )
    p.add_argument("--tasks", default="sts", help="task names and/or groups: sts, transfer, all")
    p.add_argument("--features", help="a feature spec such as layer0/sif/none (docs/features.md)")
    p.add_argument("--data-dir", help="SentEval's data/downstream folder")
    p.add_argument("--output", help="write the results as JSON (never over an existing file)")
    p.add_argument("--seed", type=int, default=1111, help="SentEval's seed (default 1111)")
    p.add_argument("--device", default="auto", help="cpu, cuda, ... (default: cuda if present)")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return p.parse_args(argv)


def main(argv: list[str] | None) -> int:
    args = options(argv)
    data_dir = args.data_dir or str(default_senteval_dir())
    tasks = choose_tasks(args.tasks, data_dir).tasks  # names checked before any work
    output = check_output_file(args.output, False, "--output", ".json file")
    device = resolve_device(args.device)
    settings = EvalSettings(seed=args.seed, device=device)  # SentEval's settings, checked

    # 1. Load: the model is read once (a shipped name, a run, a checkpoint, an exported
    #    folder or a Hub id); everything below takes the loaded object, never the path.
    loaded = load_model(args.model, device)

    # 2. The features: by default the model's own vectors (its feature spec:
    #    docs/features.md), or the spec --features names, with the statistics the model
    #    has, else fitted on its own training sentences (never on evaluation data).
    features = features_for(loaded, args.features)

    # 3. The encoder: sentences -> vectors, as the features say.
    encoder = vat_encoder(loaded, features=features)

    # 4. The tasks: SentEval's data and protocol (cosine for STS; a classifier trained on the
    #    frozen vectors for the transfer tasks), SentEval's seed and settings.
    t0 = time.perf_counter()
    results, seconds = evaluate(encoder, tasks, data_dir, settings)

    # 5. The table: what the encoder scored (its feature spec), then a row per task.
    print(f"vat:{args.model}: features {encoder.features} ({encoder.why})")
    print(format_table(results))
    if output is not None:
        meta = {
            "encoder": f"vat:{args.model}",
            "features": encoder.features,
            "tasks": tasks,
            "seed": args.seed,
            "seconds": seconds,
            "total_seconds": round(time.perf_counter() - t0, 2),
        }
        results = {**results, "_scores": task_scores(results, tasks), "_meta": meta}
        write_json_atomic(output, json_safe(results))
        print(f"wrote {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, sys.argv[1:]))  # vat's one-line errors (exit 2; --debug: traceback)
