/* cmd_train.c -- the `train` command: parses Ultralytics' training arguments (trainer/cli.h
 * conventions: unknown, repeated or malformed keys are exit 2), fills a TrainConfig and runs
 * train_run. Checkpoints go to out=DIR, or project/name as Ultralytics names them
 * (runs/detect/train by default; no train2, train3 numbering). DDP's arguments are
 * DistributedDataParallel's keywords (find_unused_parameters=, static_graph=,
 * bucket_cap_mb=, gradient_as_bucket_view=, broadcast_buffers=) plus backend=, timeout=
 * (seconds, collectives), rdzv_timeout= (seconds, start-up), nccl_hostid= (rank: the
 * test-only opt-in that lets NCCL ranks share a GPU, comm.h) and check_ddp_settings= (ours:
 * false drops the construction check that every rank has the same DDP settings, so that
 * mismatched settings behave as in PyTorch); fault= may repeat; device=
 * (trainer/device.h: cpu, fake, 0, 0,1; default DDPDBG_DEVICE, else cpu). */
#include "trainer/cmd_train.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/base.h" // DIE
#include "trainer/fault.h"
#include "trainer/cli.h"
#include "trainer/device.h"
#include "trainer/dist/comm.h" // pg_parse_nccl_hostid
#include "trainer/train.h"

// Ultralytics' booleans: true/false in either case.
static bool parse_bool(const char *key, const char *text) {
    if (strcasecmp(text, "true") == 0) return true;
    if (strcasecmp(text, "false") == 0) return false;
    DIE(2, "ddpdbg-train train: %s must be true or false, got '%s'", key, text);
}

static double parse_nonneg(const char *key, const char *text) {
    return cli_parse_double("train", key, text, 0, 1e30, "a number >= 0");
}

// Takes every fault=SPEC out of argv (it may repeat), parsed into faults; returns the new argc.
static int take_faults(int argc, char **argv, Fault *faults, int *n_faults) {
    int kept = 0;
    *n_faults = 0;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "fault=", 6) != 0) {
            argv[kept++] = argv[i];
            continue;
        }
        if (*n_faults == FAULT_MAX)
            DIE(2, "ddpdbg-train train: more than %d fault= arguments", FAULT_MAX);
        char err[512];
        if (fault_parse(argv[i] + 6, &faults[*n_faults], err, sizeof err))
            DIE(2, "ddpdbg-train train: %s", err);
        (*n_faults)++;
    }
    return kept;
}

int cmd_train(int argc, char **argv) {
    TrainConfig c;
    train_config_default(&c);
    c.argc = argc; // recorded in the trace as given (before fault= is taken out)
    c.argv = argv;
    char **args_copy = malloc(sizeof(char *) * (size_t)(argc + 1));
    memcpy(args_copy, argv, sizeof(char *) * (size_t)argc);
    c.argv = args_copy;
    // threads= defaults to OMP_NUM_THREADS (the launcher sets 1 per rank, as torchrun does),
    // else every core.
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char threads_default[32];
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp && atoi(omp) >= 1)
        snprintf(threads_default, sizeof threads_default, "%d", atoi(omp));
    else
        snprintf(threads_default, sizeof threads_default, "%ld", cores > 0 ? cores : 1);
    const char *model = NULL, *data = NULL, *imgsz = "640", *batch = "16", *epochs = "100",
               *optimizer = "auto", *lr0 = "0.01", *lrf = "0.01", *momentum = "0.937",
               *weight_decay = "0.0005", *warmup_epochs = "3.0", *warmup_momentum = "0.8",
               *warmup_bias_lr = "0.1", *nbs = "64", *seed = "0", *val = "true",
               *threads = threads_default, *out = NULL, *project = NULL, *name = NULL,
               *resume = NULL, *conf = "0.001", *augment = "true", *mosaic = NULL,
               *close_mosaic = NULL, *degrees = NULL, *translate = NULL, *scale = NULL,
               *shear = NULL, *hsv_h = NULL, *hsv_s = NULL, *hsv_v = NULL, *fliplr = NULL,
               *find_unused = "false",
               *static_graph = "false", *bucket_cap_mb = NULL, *grad_as_view = "false",
               *broadcast_buffers = "true", *check_ddp_settings = "true", *backend = "gloo",
               *timeout = "0", *rdzv_timeout = "120", *nccl_hostid = NULL,
               *trace = getenv("DDPDBG_TRACE_DIR"), *device = device_default_spec();
    const KeyArg keys[] = {{"model", &model},
                           {"data", &data},
                           {"imgsz", &imgsz},
                           {"batch", &batch},
                           {"epochs", &epochs},
                           {"optimizer", &optimizer},
                           {"lr0", &lr0},
                           {"lrf", &lrf},
                           {"momentum", &momentum},
                           {"weight_decay", &weight_decay},
                           {"warmup_epochs", &warmup_epochs},
                           {"warmup_momentum", &warmup_momentum},
                           {"warmup_bias_lr", &warmup_bias_lr},
                           {"nbs", &nbs},
                           {"seed", &seed},
                           {"val", &val},
                           {"threads", &threads},
                           {"out", &out},
                           {"project", &project},
                           {"name", &name},
                           {"resume", &resume},
                           {"conf", &conf},
                           {"augment", &augment},
                           {"mosaic", &mosaic},
                           {"close_mosaic", &close_mosaic},
                           {"degrees", &degrees},
                           {"translate", &translate},
                           {"scale", &scale},
                           {"shear", &shear},
                           {"hsv_h", &hsv_h},
                           {"hsv_s", &hsv_s},
                           {"hsv_v", &hsv_v},
                           {"fliplr", &fliplr},
                           {"find_unused_parameters", &find_unused},
                           {"static_graph", &static_graph},
                           {"bucket_cap_mb", &bucket_cap_mb},
                           {"gradient_as_bucket_view", &grad_as_view},
                           {"broadcast_buffers", &broadcast_buffers},
                           {"check_ddp_settings", &check_ddp_settings},
                           {"backend", &backend},
                           {"timeout", &timeout},
                           {"rdzv_timeout", &rdzv_timeout},
                           {"nccl_hostid", &nccl_hostid},
                           {"trace", &trace},
                           {"device", &device}};
    Fault faults[FAULT_MAX];
    int n_faults;
    argc = take_faults(argc, argv, faults, &n_faults);
    cli_parse_keys("train", argc, argv, keys, (int)(sizeof keys / sizeof keys[0]));
    if (!model) DIE(2, "ddpdbg-train train: missing model= (a yaml path or a built-in name)");
    if (!data) DIE(2, "ddpdbg-train train: missing data= (a data yaml, e.g. from `synth`)");
    if (out && (project || name))
        DIE(2, "ddpdbg-train train: give out= or project=/name=, not both");
    c.model = model;
    c.data = data;
    c.imgsz = (int)cli_parse_int("train", "imgsz", imgsz, 32, 8192);
    if (c.imgsz % 32) { // check_imgsz: rounded up to the stride
        int up = (c.imgsz + 31) / 32 * 32;
        fprintf(stderr, "WARNING: imgsz=%d must be multiple of max stride 32, updating to %d\n",
                c.imgsz, up);
        c.imgsz = up;
    }
    c.batch = (int)cli_parse_int("train", "batch", batch, 1, 1 << 20);
    c.epochs = (int)cli_parse_int("train", "epochs", epochs, 1, 1 << 20);
    if (strcmp(optimizer, "auto") && strcmp(optimizer, "AdamW") && strcmp(optimizer, "SGD"))
        DIE(2, "ddpdbg-train train: optimizer must be auto, AdamW or SGD, got '%s'", optimizer);
    c.optimizer = optimizer;
    c.lr0 = parse_nonneg("lr0", lr0);
    c.lrf = parse_nonneg("lrf", lrf);
    c.momentum = cli_parse_double("train", "momentum", momentum, 0, 1, "a number in [0, 1]");
    c.weight_decay = parse_nonneg("weight_decay", weight_decay);
    c.warmup_epochs = parse_nonneg("warmup_epochs", warmup_epochs);
    c.warmup_momentum =
        cli_parse_double("train", "warmup_momentum", warmup_momentum, 0, 1, "a number in [0, 1]");
    c.warmup_bias_lr = parse_nonneg("warmup_bias_lr", warmup_bias_lr);
    c.nbs = (int)cli_parse_int("train", "nbs", nbs, 1, 1 << 20);
    c.seed = (uint64_t)cli_parse_int("train", "seed", seed, 0, INT64_MAX);
    c.val = parse_bool("val", val);
    c.augment = parse_bool("augment", augment);
    // Ultralytics' augmentation hyperparameters (default.yaml's names): each 0 turns its
    // transform off; augment=false turns them all off.
    AugmentConfig *a = &c.aug;
    const char *unit = "a number in [0, 1]";
    if (mosaic) a->mosaic = (float)cli_parse_double("train", "mosaic", mosaic, 0, 1, unit);
    if (close_mosaic)
        a->close_mosaic = (int)cli_parse_int("train", "close_mosaic", close_mosaic, 0, 1 << 20);
    if (degrees)
        a->degrees = (float)cli_parse_double("train", "degrees", degrees, 0, 180,
                                             "a number of degrees in [0, 180]");
    if (translate) a->translate = (float)cli_parse_double("train", "translate", translate, 0, 1, unit);
    if (scale)
        a->scale = (float)cli_parse_double("train", "scale", scale, 0, 0.99, "a number in [0, 0.99]");
    if (shear)
        a->shear = (float)cli_parse_double("train", "shear", shear, 0, 89,
                                           "a number of degrees in [0, 89]");
    if (hsv_h) a->hsv_h = (float)cli_parse_double("train", "hsv_h", hsv_h, 0, 1, unit);
    if (hsv_s) a->hsv_s = (float)cli_parse_double("train", "hsv_s", hsv_s, 0, 1, unit);
    if (hsv_v) a->hsv_v = (float)cli_parse_double("train", "hsv_v", hsv_v, 0, 1, unit);
    if (fliplr) a->fliplr = (float)cli_parse_double("train", "fliplr", fliplr, 0, 1, unit);
    c.threads = (int)cli_parse_int("train", "threads", threads, 1, 1024);
    c.conf = cli_parse_double("train", "conf", conf, 0, 1, "a number in [0, 1]");
    char dir[4096];
    if (out)
        snprintf(dir, sizeof dir, "%s", out);
    else
        snprintf(dir, sizeof dir, "%s/%s", project ? project : "runs/detect",
                 name ? name : "train");
    c.out_dir = dir;
    // resume=true continues the run's own last.ckpt (Ultralytics' resume=True); else a path
    char last[4200];
    if (resume && strcasecmp(resume, "false") == 0) resume = NULL;
    if (resume && strcasecmp(resume, "true") == 0) {
        snprintf(last, sizeof last, "%s/last.ckpt", dir);
        resume = last;
    }
    c.resume = resume;

    DdpConfig *d = &c.ddp;
    d->reducer.find_unused_parameters = parse_bool("find_unused_parameters", find_unused);
    d->reducer.static_graph = parse_bool("static_graph", static_graph);
    d->reducer.gradient_as_bucket_view = parse_bool("gradient_as_bucket_view", grad_as_view);
    d->broadcast_buffers = parse_bool("broadcast_buffers", broadcast_buffers);
    d->check_settings = parse_bool("check_ddp_settings", check_ddp_settings);
    if (bucket_cap_mb) {
        // PyTorch 2.x: a cap the user chose applies to the first bucket too (no 1 MiB bucket).
        double mb = cli_parse_double("train", "bucket_cap_mb", bucket_cap_mb, 1e-6, 1e6,
                                     "a size in MiB in (0, 1e6]");
        d->reducer.bucket_bytes_cap = (int64_t)(mb * 1024 * 1024);
        if (d->reducer.bucket_bytes_cap < 1)
            DIE(2, "ddpdbg-train train: bucket_cap_mb=%s is under one byte", bucket_cap_mb);
        d->reducer.first_bucket_bytes_cap = d->reducer.bucket_bytes_cap;
    }
    if (strcmp(backend, "gloo") && strcmp(backend, "nccl"))
        DIE(2, "ddpdbg-train train: backend must be gloo or nccl, got '%s'", backend);
    c.backend = backend;
    c.timeout_s = (int)cli_parse_int("train", "timeout", timeout, 0, 7 * 24 * 3600);
    c.rdzv_timeout_s = (int)cli_parse_int("train", "rdzv_timeout", rdzv_timeout, 1, 24 * 3600);
    char why[512];
    const char *hostid_from = "ddpdbg-train train: nccl_hostid";
    if (!nccl_hostid) { // the environment's opt-in, checked here so that a typo fails at once
        hostid_from = "ddpdbg-train train: DDPDBG_NCCL_HOSTID";
        nccl_hostid = getenv("DDPDBG_NCCL_HOSTID");
    }
    if (pg_parse_nccl_hostid(hostid_from, nccl_hostid, &c.nccl_hostid_per_rank, why, sizeof why))
        DIE(2, "%s", why);
    const char *debug = getenv("TORCH_DISTRIBUTED_DEBUG");
    if (debug_level_parse(debug, &d->reducer.debug))
        DIE(2, "ddpdbg-train train: TORCH_DISTRIBUTED_DEBUG=%s: expected OFF, INFO or DETAIL",
            debug);
    // device=: checked here so that a CUDA device in a CPU build is one line and exit 2
    // before anything loads; train_run picks this rank's entry of a list by LOCAL_RANK.
    const char *local_rank = getenv("LOCAL_RANK");
    DeviceChoice dev;
    if (device_parse(device, local_rank ? atoi(local_rank) : 0, &dev, why, sizeof why))
        DIE(2, "ddpdbg-train train: %s", why);
    c.device = device;
    c.faults = faults;
    c.n_faults = n_faults;
    c.trace_dir = trace; // trace=DIR, else DDPDBG_TRACE_DIR (set by `ddpdbg run --trace`)

    static char err[1 << 16]; // DDP errors list parameter names: tens of KiB on big models
    int rc = train_run(&c, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    free(args_copy);
    const char *world = getenv("WORLD_SIZE");
    if (rc && world && atoi(world) > 1) {
        // A DDP rank that failed leaves at once, as a Python process that raises does: its
        // process group and store are not torn down (that would wait for peers that may be
        // stuck in a collective with it); exit closes the sockets and the peers' waits fail.
        fflush(NULL);
        _exit(rc);
    }
    return rc;
}
