/*
 * train.c - the seed's PyTorch training scripts rebuilt in C (shared by resnet50_cifar10.c
 * and grad_accum.c). Line for line, the plain loop is:
 *
 *   model = resnet50(classes); opt = SGD(lr 0.01); scaler = GradScaler()
 *   for epoch: for (x, y) in loader:
 *       opt.zero_grad(); with autocast(fp16): loss = cross_entropy(model(x), y)
 *       scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
 *       print(f"Epoch {epoch}, Loss: {loss.item()}")
 *
 * The accumulation loop divides the loss by --accum and steps every --accum micro-batches,
 * then zero-grads and empties the cache. As in the seed, the micro-batch counter restarts
 * every epoch; the seed's 196 batches per epoch divide by 4, otherwise the gradients of an
 * epoch's unfinished group carry into the next epoch's first group (also as in the seed). Unlike the seed script (which calls zero_grad at the
 * top of every iteration and so never accumulates anything), gradients are zeroed only after
 * an optimizer step: PyTorch's documented recipe, and what the script meant.
 *
 * Reading the loss synchronises with the GPU, as loss.item() does; --log-every 0 prints only
 * per epoch and lets the GPU run ahead.
 *
 * Graph mode (train_step.h), the default on CUDA: each epoch's optimizer steps made of full
 * batches replay one captured CUDA graph (the first is the capture's warm-up call); the loss
 * is printed once per optimizer step, the last micro-batch's. Plain calls take the rest of
 * the epoch: a group completing gradients carried from the last epoch, the short last batch,
 * a group the epoch cannot finish. Same steps as eager mode: on an H200 the epoch losses of
 * the CIFAR-10 subset agreed to the digit at twice the speed (scripts/device/gpu_check.sh,
 * stage example), and the examples test compares them on the CPU. --eager (or --mode eager)
 * opts out. The CPU has no graphs, so its default is eager; an explicit --mode graph there
 * runs the graph's step as plain calls (the same losses) and says so.
 *
 * Data parallel (--gpus N, or started by dltrain-run, torchrun or mpirun): one process per
 * GPU, as PyTorch's DDP recipe: each rank trains on its DistributedSampler shard with
 * --batch images per step, DDP averages the gradients (BatchNorm stays per GPU, its buffers
 * broadcast from rank 0 at each forward), the GradScaler's skip decision is agreed, rank 0
 * alone prints, evaluates and saves. With --gpus N and no launcher around, the program
 * starts its N ranks itself (launch.c) and waits for them.
 */
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dltrain.h>

#include "cli.h"
#include "launch.h"
#include "report.h"
#include "train.h"
#include "train_step.h"

typedef struct options {
    const char *data, *save, *resume;
    int64_t epochs, steps, batch, classes, log_every, accum;
    double lr, momentum;
    int32_t amp;    /* -1 off, DLT_F16, DLT_BF16 */
    int32_t device; /* -1 auto */
    int32_t format; /* -1 auto */
    uint64_t seed;
    int eval;
    int32_t graph;    /* --mode: 1 graph (one captured CUDA graph per optimizer step), 0 eager,
                       * -1 not given: graph on CUDA, eager on the CPU */
    int eager;        /* --eager: --mode eager */
    int cudnn_benchmark; /* --cudnn-benchmark: dlt_ctx_set_cudnn_benchmark */
    const char *json; /* --json FILE: the run record */
    int64_t gpus;     /* data-parallel processes (dist) */
} options;

/* Numeric flags are bounded here (issue 20 item 13): a value outside the bounds is a usage
 * error (exit 2), never a run that fails later with the library's message (exit 1). */
static const char *const AMP_NAMES[] = {"fp16", "bf16", "off", NULL};
static const int32_t AMP_VALUES[] = {DLT_F16, DLT_BF16, -1};
static const char *const DEVICE_NAMES[] = {"cuda", "cpu", NULL};
static const int32_t DEVICE_VALUES[] = {DLT_DEVICE_CUDA, DLT_DEVICE_CPU};
static const char *const MODE_NAMES[] = {"eager", "graph", NULL};
static const int32_t MODE_VALUES[] = {0, 1};
static const char *const FORMAT_NAMES[] = {"nchw", "nhwc", NULL};
static const int32_t FORMAT_VALUES[] = {DLT_FORMAT_CONTIGUOUS, DLT_FORMAT_CHANNELS_LAST};

/* Returns 0 to run, 1 after --help, 2 on a usage error (message and usage printed). */
static int parse_args(int argc, char **argv, const char *prog, int accum_default, options *o) {
    memset(o, 0, sizeof *o);
    o->epochs = 10;
    o->batch = 256;
    o->classes = 10;
    o->log_every = 1;
    o->accum = accum_default;
    o->lr = 0.01;
    o->amp = DLT_F16;
    o->device = -1;
    o->format = -1;
    o->gpus = 1;
    o->graph = -1;
    int64_t seed = 0;
    const cli_option opts[] = {
        {"data", CLI_STRING, &o->data, .metavar = "DIR",
         .help = "CIFAR-10 binary directory (data_batch_N.bin, test_batch.bin);\nwithout it, or if "
                 "it holds no batch file, a synthetic dataset is used"},
        {"epochs", CLI_INT, &o->epochs, .lo = 1, .hi = 1000000, .metavar = "N", .help = "epochs (10)"},
        {"steps", CLI_INT, &o->steps, .lo = 0, .hi = 1000000000000, .metavar = "N",
         .help = "stop after N steps in total (0: no limit)"},
        {"batch", CLI_INT, &o->batch, .lo = 1, .hi = 65536, .metavar = "N", .help = "batch size (256)"},
        {"lr", CLI_REAL, &o->lr, .rlo = 0, .rhi = 1000, .metavar = "X", .help = "learning rate (0.01)"},
        {"momentum", CLI_REAL, &o->momentum, .rlo = 0, .rhi = 1, .metavar = "X", .help = "SGD momentum (0)"},
        {"classes", CLI_INT, &o->classes, .lo = 1, .hi = 100000, .metavar = "N",
         .help = "classifier outputs (10; 1000 reproduces the seed's model)"},
        {"amp", CLI_CHOICE, &o->amp, .choices = AMP_NAMES, .values = AMP_VALUES, .metavar = "MODE",
         .help = "fp16 (GradScaler on), bf16 or off (fp16)"},
        {"device", CLI_CHOICE, &o->device, .choices = DEVICE_NAMES, .values = DEVICE_VALUES, .metavar = "DEV",
         .help = "cuda or cpu (cuda when present)"},
        {"format", CLI_CHOICE, &o->format, .choices = FORMAT_NAMES, .values = FORMAT_VALUES, .metavar = "F",
         .help = "nchw or nhwc (nhwc on cuda, nchw on cpu)"},
        {"log-every", CLI_INT, &o->log_every, .lo = 0, .hi = 1000000000, .metavar = "N",
         .help = "print the loss every N steps (1; 0: once per epoch)"},
        {"seed", CLI_INT, &seed, .lo = 0, .hi = INT64_MAX, .metavar = "N",
         .help = "seed for init, shuffling and synthetic data (0)"},
        {"eval", CLI_FLAG, &o->eval, .help = "test accuracy after each epoch"},
        {"mode", CLI_CHOICE, &o->graph, .choices = MODE_NAMES, .values = MODE_VALUES, .metavar = "M",
         .help = "graph (one captured CUDA graph per optimizer step,\nreplayed; the default on cuda) or eager (plain calls;\n"
                 "the default on cpu, which has no graphs)"},
        {"eager", CLI_FLAG, &o->eager, .help = "plain calls instead of a captured graph (--mode eager)"},
        {"cudnn-benchmark", CLI_FLAG, &o->cudnn_benchmark,
         .help = "time cuDNN's engines for each convolution shape in the first steps and keep\nthe "
                 "fastest (torch.backends.cudnn.benchmark; the seed leaves it off)"},
        {"save", CLI_STRING, &o->save, .metavar = "FILE",
         .help = "checkpoint (model, optimizer, scaler, position) after each epoch"},
        {"resume", CLI_STRING, &o->resume, .metavar = "FILE", .help = "continue from a checkpoint"},
        {"json", CLI_STRING, &o->json, .metavar = "FILE",
         .help = "also write the run record (JSON, docs/run-record.md) to FILE"},
        {"gpus", CLI_INT, &o->gpus, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "data-parallel processes, one per GPU, --batch each (1); started here\nunless a "
                 "launcher (dltrain-run, torchrun, mpirun) started this one"},
        /* last: only the accumulation script has it */
        {"accum", CLI_INT, &o->accum, .lo = 1, .hi = 65536, .metavar = "N",
         .help = "micro-batches per optimizer step (4)"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]) - (accum_default > 1 ? 0 : 1);
    int rc = cli_parse(argc, argv, prog, opts, n);
    o->seed = (uint64_t)seed;
    if (rc == 0 && o->eager && o->graph == 1) {
        fprintf(stderr, "%s: --eager and --mode graph contradict each other\n", prog);
        cli_usage(stderr, prog, opts, n);
        return 2;
    }
    if (o->eager) o->graph = 0;
    return rc;
}

/* Fails the run with the library's message. */
#define TRY(call)                                                                             \
    do {                                                                                      \
        dlt_status st_ = (call);                                                              \
        if (st_ != DLT_OK) {                                                                  \
            fprintf(stderr, "%s: %s\n", prog, dlt_last_error());                              \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The CIFAR-10 directory holds at least one training batch name. A name counts when it
 * has a directory entry, readable or not, and when it cannot be looked up at all (an
 * unsearchable directory): the reader then names the file it cannot read, and the run
 * fails, instead of training on synthetic data because access() said no (issue 20 item
 * 10). Only names that are certainly absent (ENOENT) leave the synthetic fallback. */
static int has_cifar(const char *dir) {
    char p[4096];
    for (int i = 1; i <= 5; i++) {
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, i);
        struct stat sb;
        if (lstat(p, &sb) == 0 || errno != ENOENT) return 1;
    }
    return 0;
}

int dlt_example_train(int argc, char **argv, const char *prog, int accum_default) {
    options o;
    int rc = parse_args(argc, argv, prog, accum_default, &o);
    if (rc == 1) return 0; /* --help */
    if (rc) return rc;

    dlt_ctx *ctx = NULL;
    dlt_dataset *train_ds = NULL, *test_ds = NULL;
    dlt_loader *loader = NULL, *test_loader = NULL;
    dlt_module *model = NULL;
    dlt_optimizer *opt = NULL;
    dlt_grad_scaler *scaler = NULL;
    dlt_tensor **params = NULL;
    dlt_tensor *epoch_loss = NULL; /* --log-every 0: the epoch's last loss, read at its end */
    dlt_tensor *loss_out = NULL;   /* the step's loss (train_step.h) */
    dlt_graph *graph = NULL;
    dlt_comm *comm = NULL;
    dlt_ddp *ddp = NULL;
    report_run run;
    report_init(&run);
    int exit_code = 1;

    /* data parallel: this process's rank, or start the ranks here */
    int32_t rank = 0, world = 1, local_rank = 0;
    if (dlt_dist_env(&rank, &world, &local_rank) != DLT_OK) {
        fprintf(stderr, "%s: %s\n", prog, dlt_last_error());
        return 1;
    }
    if (o.gpus > 1 && world == 1) return dlt_launch_self(prog, (int)o.gpus, argc, argv);
    const int lead = rank == 0;
    if (!lead && !freopen("/dev/null", "w", stdout)) { /* rank 0 speaks for the run; errors still show */
        fprintf(stderr, "%s: rank %d: cannot silence stdout\n", prog, rank);
        return 1;
    }
    if (o.json && lead && report_record_begin(&run, o.json, prog, argc, argv) != 0) goto fail;

    int32_t ngpu = 0;
    TRY(dlt_cuda_device_count(&ngpu));
    if (o.device < 0) o.device = ngpu > 0 ? DLT_DEVICE_CUDA : DLT_DEVICE_CPU;
    if (o.graph < 0) o.graph = o.device == DLT_DEVICE_CUDA; /* the CPU has no graphs to capture */
    /* what runs: an explicit --mode graph on the CPU takes the graph's path, as plain calls */
    const char *mode = !o.graph ? "eager" : o.device == DLT_DEVICE_CUDA ? "graph" : "eager (no CUDA graphs on the CPU)";
    const int32_t dev_index = (o.device == DLT_DEVICE_CUDA && ngpu > 0) ? local_rank % ngpu : 0;
    TRY(dlt_ctx_create(o.device, dev_index, DLT_ABI_VERSION, &ctx));
    if (world > 1) TRY(dlt_comm_create(ctx, &comm));
    TRY(dlt_ctx_set_seed(ctx, o.seed));
    if (o.cudnn_benchmark) TRY(dlt_ctx_set_cudnn_benchmark(ctx, 1));
    if (o.format < 0) o.format = o.device == DLT_DEVICE_CUDA ? DLT_FORMAT_CHANNELS_LAST : DLT_FORMAT_CONTIGUOUS;
    char devname[256];
    TRY(dlt_ctx_device_name(ctx, devname, sizeof devname));

    /* data */
    int real = o.data && has_cifar(o.data);
    if (real) {
        TRY(dlt_cifar10_open(ctx, o.data, DLT_SPLIT_TRAIN, &train_ds));
        if (o.eval) TRY(dlt_cifar10_open(ctx, o.data, DLT_SPLIT_TEST, &test_ds));
    } else {
        printf("note: %s; training on a synthetic CIFAR-10-shaped dataset (50,000 images)\n",
               o.data ? "no CIFAR-10 binary batches in --data" : "no --data given");
        TRY(dlt_synthetic_dataset_create(ctx, 50000, 10, o.seed + 1, 1, &train_ds));
        /* another seed: fresh images of the same ten class patterns */
        if (o.eval) TRY(dlt_synthetic_dataset_create(ctx, 10000, 10, o.seed + 1000003, 1, &test_ds));
    }
    /* On CUDA the loader writes the compute dtype and layout directly: the same values
     * ToTensor + autocast's cast would give (byte/255 in fp32, then rounded). */
    const int32_t in_dtype = (o.device == DLT_DEVICE_CUDA && o.amp >= 0) ? o.amp : DLT_F32;
    TRY(dlt_loader_create(train_ds, o.batch, 1, 0, o.seed, &loader));
    TRY(dlt_loader_set_output(loader, in_dtype, o.format, DLT_I64));
    if (comm) TRY(dlt_loader_set_distributed(loader, world, rank, 0)); /* this rank's shard */
    if (test_ds && lead) {
        TRY(dlt_loader_create(test_ds, o.batch, 0, 0, 0, &test_loader));
        TRY(dlt_loader_set_output(test_loader, in_dtype, o.format, DLT_I64));
    }

    /* model, optimizer, scaler */
    double t_start = now_s();
    TRY(dlt_resnet50_create(ctx, o.classes, &model));
    if (o.format == DLT_FORMAT_CHANNELS_LAST) TRY(dlt_module_set_format(model, DLT_FORMAT_CHANNELS_LAST));
    if (comm) TRY(dlt_ddp_create(comm, model, &ddp)); /* rank 0's weights everywhere */
    int32_t np = dlt_module_num_params(model);
    params = calloc((size_t)np, sizeof *params);
    if (!params) {
        fprintf(stderr, "%s: out of memory\n", prog);
        goto fail;
    }
    TRY(dlt_module_params(model, params, np, NULL));
    TRY(dlt_sgd_create(params, np, o.lr, o.momentum, 0.0, 0.0, 0, 0, &opt));
    TRY(dlt_grad_scaler_create(ctx, 65536.0, 2.0, 0.5, 2000, o.amp == DLT_F16, &scaler));
    if (comm) TRY(dlt_grad_scaler_set_comm(scaler, comm)); /* every rank skips the same steps */
    printf("parameters: %lld\n", (long long)dlt_module_param_count(model));
    printf("model: resnet50 (%lld classes), device: %s, batch %lld, amp %s, %s, mode: %s, data: %s\n",
           (long long)o.classes, devname, (long long)o.batch,
           o.amp == DLT_F16 ? "fp16 + GradScaler" : o.amp == DLT_BF16 ? "bf16" : "off",
           o.format == DLT_FORMAT_CHANNELS_LAST ? "channels-last" : "NCHW", mode,
           real ? o.data : "synthetic");
    if (o.accum > 1) printf("gradient accumulation: %lld micro-batches per optimizer step\n", (long long)o.accum);
    if (comm)
        printf("data parallel: %d processes (%s) x batch %lld = global batch %lld\n", world, dlt_comm_backend(comm),
               (long long)o.batch, (long long)o.batch * world);

    int64_t start_epoch = 0, global_step = 0;
    const int64_t nb = dlt_loader_num_batches(loader);
    if (o.resume) {
        TRY(dlt_checkpoint_load(o.resume, model, opt, scaler, &start_epoch, &global_step));
        printf("resumed from %s at epoch %lld (step %lld)\n", o.resume, (long long)start_epoch,
               (long long)global_step);
        /* the position is the checkpoint's (never negative: the loader refuses that); what
         * this run can do from it is checked here (issue 20 item 6) */
        if (start_epoch > o.epochs) {
            fprintf(stderr, "%s: %s is at epoch %lld, past --epochs %lld\n", prog, o.resume,
                    (long long)start_epoch, (long long)o.epochs);
            goto fail;
        }
        /* at most (epochs - start_epoch) * nb more steps: the counter must hold them */
        if (global_step > INT64_MAX - (o.epochs - start_epoch) * nb) {
            fprintf(stderr, "%s: %s is at step %lld: %lld more epochs of %lld steps would overflow "
                    "the step counter\n", prog, o.resume, (long long)global_step,
                    (long long)(o.epochs - start_epoch), (long long)nb);
            goto fail;
        }
        if (start_epoch == o.epochs) {
            printf("nothing to train: %s has finished all %lld epochs (raise --epochs to continue)\n",
                   o.resume, (long long)o.epochs);
            exit_code = 0;
            goto fail;
        }
    }

    /* the step, and its graph (on the CPU dlt_graph_create falls back to plain calls) */
    train_step s = {.ctx = ctx, .loader = loader, .model = model, .ddp = ddp, .opt = opt, .scaler = scaler,
                    .amp = o.amp, .accum = o.accum};
    TRY(dlt_tensor_zeros(ctx, DLT_F32, NULL, 0, 0, &s.loss_out));
    loss_out = s.loss_out;
    const int use_graph = o.graph;
    const int64_t full_batches = nb - (dlt_loader_num_samples(loader) % o.batch != 0);
    int carry = 0; /* accumulating: the last epoch left an unfinished group's gradients */

    report_monitor_start(&run, o.device == DLT_DEVICE_CUDA ? 0 : -1);
    int stop = 0;
    double first_step_s = -1;
    for (int64_t epoch = start_epoch; epoch < o.epochs && !stop; epoch++) {
        TRY(dlt_loader_start_epoch(loader, epoch));
        TRY(dlt_memory_reset_peak(ctx));
        double t0 = now_s(), t_steady = -1;
        int64_t i = 0, images = 0, images_steady = 0, steps_steady = 0;
        double last_loss = NAN;
        int32_t has = 0;
        /* Graph mode: the epoch's optimizer steps made of full batches are replays of one
         * captured step. Plain calls (the same step, a micro-batch at a time) take the rest:
         * a group that completes gradients carried from the last epoch, the partial last
         * batch, a group this epoch cannot finish, and everything with --mode eager. */
        const int64_t head = carry ? o.accum : 0;
        int64_t units = use_graph ? (full_batches - head) / o.accum : 0;
        if (units > 0 && o.steps > 0) {
            const int64_t left = (o.steps - global_step - head) / o.accum;
            units = left < units ? (left > 0 ? left : 0) : units;
        }
        int64_t unit = 0, replays = 0; /* captured replays move the loader's device cursor only */
        for (;;) {
            if (o.steps > 0 && global_step >= o.steps) {
                stop = 1;
                break;
            }
            dlt_tensor *loss = NULL; /* the loss to print: a graph step leaves it in s.loss_out */
            int64_t n = 1, rows = 0; /* micro-batches and images of this iteration */
            if (unit < units && i == head + unit * o.accum) {
                if (!graph) {
                    /* its warm-up call is this step (plain calls); the capture runs nothing */
                    TRY(dlt_graph_create(ctx, train_step_run, &s, 1, &graph));
                    if (o.device == DLT_DEVICE_CUDA && !dlt_graph_is_captured(graph)) {
                        /* the library fell back to plain calls: the run is still right, only slower */
                        mode = "eager (capture failed)";
                        report_progress_clear(&run);
                        printf("note: the step could not be captured as a CUDA graph; it runs as plain calls\n");
                    }
                } else {
                    TRY(dlt_graph_run(graph));
                    if (dlt_graph_is_captured(graph)) replays++;
                }
                if (++unit == units && replays)
                    TRY(dlt_loader_seek(loader, dlt_loader_position(loader) + replays * o.accum));
                n = o.accum;
                rows = o.batch * o.accum;
                loss = dlt_tensor_retain(s.loss_out);
            } else {
                if (o.accum == 1) TRY(dlt_optimizer_zero_grad(opt, 1));
                /* DDP's no_sync on the micro-batches that do not step */
                TRY(train_micro_batch(&s, o.accum > 1 && (i + 1) % o.accum != 0, &has, &rows, &loss));
                if (!has) break;
                if (o.accum == 1 || (i + 1) % o.accum == 0) {
                    TRY(dlt_grad_scaler_step(scaler, opt));
                    TRY(dlt_grad_scaler_update(scaler));
                    if (o.accum > 1) {
                        TRY(dlt_optimizer_zero_grad(opt, 1));
                        TRY(dlt_empty_cache(ctx));
                    }
                }
            }
            images += rows;
            images_steady += rows;
            steps_steady += n;
            /* a loss line when a logging step falls in this iteration's micro-batches */
            const int log_now = o.log_every > 0 && (global_step + n - 1) / o.log_every * o.log_every >= global_step;
            if (log_now || first_step_s < 0) {
                TRY(dlt_tensor_item(loss, &last_loss));
                if (first_step_s < 0) { /* plan building, warm-up and capture end with the first step */
                    first_step_s = now_s() - t_start;
                    t_steady = now_s();
                    steps_steady = 0; /* the counters of this step were already advanced */
                    images_steady = 0;
                }
            }
            if (log_now) {
                report_progress_clear(&run);
                printf("Epoch %lld, Loss: %.6f\n", (long long)epoch, last_loss);
                fflush(stdout);
            }
            /* --log-every 0: the epoch's line prints its last step's loss */
            dlt_tensor_release(o.log_every == 0 ? epoch_loss : loss);
            if (o.log_every == 0) epoch_loss = loss;
            i += n;
            global_step += n;
            report_progress(&run, epoch, i, nb);
        }
        carry = o.accum > 1 && i % o.accum != 0;
        TRY(dlt_ctx_synchronize(ctx));
        double dt = now_s() - t0;
        report_progress_clear(&run);
        if (i == 0) break;
        if (o.log_every == 0) {
            /* (it printed nan from the second epoch on when only the first step's loss was read) */
            if (epoch_loss) TRY(dlt_tensor_item(epoch_loss, &last_loss));
            dlt_tensor_release(epoch_loss);
            epoch_loss = NULL;
            printf("Epoch %lld, Loss: %.6f\n", (long long)epoch, last_loss);
        }
        uint64_t peak = 0;
        TRY(dlt_memory_stat(ctx, DLT_MEM_PEAK_ALLOCATED, &peak));
        double acc = -1;
        if (test_loader) {
            /* evaluation runs in the training precision (the loader feeds fp16/bf16) */
            TRY(dlt_loader_start_epoch(test_loader, 0));
            if (o.amp >= 0) TRY(dlt_autocast_begin(ctx, o.amp));
            dlt_status est = dlt_evaluate_accuracy(model, test_loader, &acc);
            if (o.amp >= 0) TRY(dlt_autocast_end(ctx));
            TRY(est);
        }
        /* the epoch that held the first step also reports its time without it */
        double steady = (t_steady > 0 && steps_steady > 0) ? now_s() - t_steady : -1;
        /* the run's throughput: every rank took as many images as this one */
        report_epoch(&run, epoch, i, nb, images * world, dt, peak, acc, steady, steps_steady, images_steady * world, t0);
        /* what stays held between epochs: flat from the second epoch on in a healthy run */
        uint64_t live = 0, nlive = 0, reserved = 0;
        TRY(dlt_memory_stat(ctx, DLT_MEM_ALLOCATED, &live));
        TRY(dlt_memory_stat(ctx, DLT_MEM_ALLOC_COUNT, &nlive));
        TRY(dlt_memory_stat(ctx, DLT_MEM_RESERVED, &reserved));
        printf("memory after epoch %lld: %.1f MiB live in %llu allocations, %.1f MiB reserved\n",
               (long long)epoch, live / 1048576.0, (unsigned long long)nlive, reserved / 1048576.0);
        if (o.save) {
            TRY(comm ? dlt_comm_checkpoint_save(comm, o.save, model, opt, scaler, epoch + 1, global_step)
                     : dlt_checkpoint_save(o.save, model, opt, scaler, epoch + 1, global_step));
            printf("saved %s\n", o.save);
        }
    }
    report_monitor_stop(&run);
    run.first_step_s = first_step_s;
    report_table(&run, "resnet50", devname, o.batch, o.amp, o.accum, o.device == DLT_DEVICE_CUDA);
    if (o.json && lead) {
        report_workload w = {.model = "resnet50", .parameters = dlt_module_param_count(model),
                             .classes = o.classes, .amp = o.amp, .grad_scaler = o.amp == DLT_F16,
                             .batch = o.batch, .accum = o.accum,
                             .memory_format = o.format == DLT_FORMAT_CHANNELS_LAST ? "nhwc" : "nchw", .mode = mode,
                             .lr = o.lr, .momentum = o.momentum, .dataset = real ? "cifar10" : "synthetic",
                             .data_path = real ? o.data : NULL, .train_samples = dlt_dataset_size(train_ds),
                             .epochs = o.epochs, .steps_limit = o.steps, .device_type = o.device,
                             .device_index = 0};
        if (report_record_write(&run, &w, o.json, prog) != 0) goto fail;
        printf("run record: %s\n", o.json);
    }
    exit_code = 0;
fail:
    dlt_graph_destroy(graph);
    dlt_tensor_release(loss_out);
    dlt_tensor_release(epoch_loss);
    report_monitor_stop(&run);
    report_fini(&run);
    free(params);
    dlt_ddp_destroy(ddp);
    dlt_grad_scaler_destroy(scaler);
    dlt_optimizer_destroy(opt);
    dlt_module_destroy(model);
    dlt_loader_destroy(loader);
    dlt_loader_destroy(test_loader);
    dlt_dataset_destroy(train_ds);
    dlt_dataset_destroy(test_ds);
    dlt_comm_destroy(comm);
    dlt_ctx_destroy(ctx);
    return exit_code;
}
