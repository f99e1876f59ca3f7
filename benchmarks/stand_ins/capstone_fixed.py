# The capstone's `my-script` cell as a student leaves it once every fix is in (the course's reference fix).
# `make gpu-record` runs it in place of the lesson's unfixed cell, so that the GPU cells of Going further
# (which profile and time the student's fixed copy) record what a finished capstone prints; notes say so.
# benchmarks/stand_ins/capstone_stages.py builds the fixes up from it one stage at a time, and
# tests/lessons/test_lesson08.py checks that check("run_epoch") calls this copy clean. Not shipped to
# students: the capstone has no worked solution.
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from devicelab.capstone import Net as ScriptNet

WORKERS = 8  # worker processes that decode batches beside the loop (the H100 host has 16 cores or more)


class Net(ScriptNet):
    def forward(self, x):
        x = x.float() / 255
        if self.training:
            x = x + self.noise * torch.randn_like(x)  # made where x is, not on the CPU
        return self.body(x)


def build_loader(dataset, device):
    """Return the DataLoader for training on `device`."""
    cuda = torch.device(device).type == "cuda"
    return DataLoader(dataset, batch_size=256, shuffle=True, pin_memory=cuda,  # pinned batches
                      num_workers=WORKERS if cuda else 0,  # decoded beside the loop
                      persistent_workers=cuda)  # workers started once, not every epoch


def run_epoch(model, loader, optimizer, device):
    """Train one epoch; return the loss of every step (a tensor on the device: no sync per step)."""
    side = torch.cuda.Stream()
    batches = iter(loader)

    def upload(batch):
        with torch.cuda.stream(side):  # the next batch's copy runs under this step's kernels
            return [t.to(device, non_blocking=True) for t in batch]

    losses, following = [], upload(next(batches))
    for step in range(len(loader)):
        torch.cuda.current_stream().wait_stream(side)
        x, y = following
        x.record_stream(torch.cuda.current_stream())
        y.record_stream(torch.cuda.current_stream())
        if step + 1 < len(loader):
            following = upload(next(batches))
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
