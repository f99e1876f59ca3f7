"""Predictions for lesson 09, devices in real code: each is answered by a cell that runs on the CPU."""

from devicelab.predict import Prediction, asker

PREDICTIONS = {
    "adam-state": Prediction(
        question=("A model has 1.06 million float32 parameters (4.0 MiB). After one `optimizer.step()` of "
                  "`torch.optim.Adam`, how much memory does the optimizer's own state hold?"),
        choices=("nothing: Adam keeps no tensors of its own", "about 4 MiB, as much as the parameters",
                 "about 8 MiB, twice the parameters", "about 16 MiB, four times the parameters"),
        answer="about 8 MiB, twice the parameters",
        giveaways=("exp_avg_sq", "two tensors per parameter", "twice the parameters", "2 x the parameters",
                   "two running averages"),
        reason=("Adam keeps two running averages per parameter, `exp_avg` and `exp_avg_sq`, each the "
                "parameter's size and dtype, plus a tiny `step` counter. They appear at the first step.")),
    "autocast-dtypes": Prediction(
        question=("Inside `with torch.autocast(device_type=\"cpu\", dtype=torch.bfloat16):`, a float32 "
                  "`nn.Linear` is applied to a float32 input. What are the dtypes of `linear.weight` and of "
                  "the output?"),
        choices=("both bfloat16", "weight float32, output bfloat16", "both float32"),
        answer="weight float32, output bfloat16",
        giveaways=("weights stay float32", "parameters stay float32", "casts the inputs",
                   "copy of each weight"),
        reason=("Autocast leaves parameters alone: it casts an op's inputs as the op runs (the linear's "
                "matmul in bfloat16), so the output is bfloat16 and the weight stays float32.")),
    "optimizer-load-device": Prediction(
        question=("An Adam state saved from CPU tensors is loaded with `optimizer.load_state_dict(...)` into "
                  "an optimizer whose parameters are on `meta` (standing in for a GPU). Where is `exp_avg` "
                  "afterwards?"),
        choices=("on the CPU, where it was saved", "on meta, the parameters' device",
                 "load_state_dict raises a device error"),
        answer="on meta, the parameters' device",
        giveaways=("casts the state", "to the parameter's device", "follows the parameters",
                   "_process_value_according_to_param_policy"),
        reason=("`Optimizer.load_state_dict` casts each state tensor to its parameter's device (and float "
                "dtype); only Adam's `step` counter stays where it was.")),
}

ask = asker(PREDICTIONS)
