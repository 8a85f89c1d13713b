# PyTorch DDP peer of scripts/device/ddp_check.sh: the same data-parallel training step as
# libdltrain's examples, under torchrun, one process per GPU, synthetic data resident on the
# GPU. Rank 0 prints one JSON line: model, world size, per-GPU batch, ms/step, samples/s (all
# GPUs together; tokens/s for GPT-2).
#
#   torchrun --nproc-per-node 4 scripts/device/torch_ddp.py resnet50   (B=256 per GPU)
#   torchrun --nproc-per-node 4 scripts/device/torch_ddp.py gpt2       (B=16, T=1024 per GPU)
# Env: B, T, STEPS (50), WARM (10), ANCHORS (the folder holding torch_gpt2.py: .device/anchors)
import json, os, sys, time
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

model_name = sys.argv[1] if len(sys.argv) > 1 else "resnet50"
STEPS = int(os.environ.get("STEPS", "50")); WARM = int(os.environ.get("WARM", "10"))
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.backends.cudnn.benchmark = True
torch.manual_seed(0)

if model_name == "resnet50":
    import torchvision
    B = int(os.environ.get("B", "256"))
    model = torchvision.models.resnet50(num_classes=10).cuda().to(memory_format=torch.channels_last)
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler()
    x = torch.randn(B, 3, 32, 32, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (B,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(ddp(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    per_step = B
else:
    os.environ.setdefault("CONFIG", model_name)
    sys.path.insert(0, os.environ.get("ANCHORS", ".device/anchors"))
    import torch_gpt2  # the anchor's GPT-2 (its B/T come from the same environment)
    B, T = torch_gpt2.B, torch_gpt2.T
    model = torch_gpt2.GPT().cuda()
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.AdamW(ddp.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    x = torch.randint(0, 50257, (B, T), device="cuda")
    y = torch.randint(0, 50257, (B, T), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
    per_step = B * T

for _ in range(WARM):
    step()
torch.cuda.synchronize(); dist.barrier()
t0 = time.perf_counter()
for _ in range(STEPS):
    step()
torch.cuda.synchronize(); dist.barrier()
ms = (time.perf_counter() - t0) * 1000.0 / STEPS
if rank == 0:
    print(json.dumps(dict(impl="pytorch-ddp", model=model_name, world=world, batch_per_gpu=B,
                          ms_per_step=round(ms, 3),
                          per_s_all_gpus=round(per_step * world * 1000.0 / ms, 1),
                          unit="images" if model_name == "resnet50" else "tokens")), flush=True)
dist.destroy_process_group()
