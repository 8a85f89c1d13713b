/*
 * train.h - the training loop shared by examples/resnet50_cifar10.c and
 * examples/grad_accum.c: flag parsing, data, model, the step, logging, the summary table.
 */
#ifndef DLT_EXAMPLES_TRAIN_H
#define DLT_EXAMPLES_TRAIN_H

/* accum_default = 1: the mixed-precision script; > 1: the gradient-accumulation script
 * (which also accepts --accum N). Returns the process exit code: 0 success, 1 runtime
 * error (message on stderr), 2 usage error (usage on stderr). */
int dlt_example_train(int argc, char **argv, const char *prog, int accum_default);

#endif
