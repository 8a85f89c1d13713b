/*
 * grad_accum.c - the seed's gradient-accumulation script in C: the loss divided by 4,
 * backward every micro-batch, scaler step and update every 4th, then zero-grad and
 * empty-cache.
 *
 * The seed script calls optimizer.zero_grad() at the top of EVERY iteration, which throws
 * the accumulated gradients away, so it never accumulated anything. This example does what
 * the script meant (PyTorch's documented recipe): gradients are zeroed only after an
 * optimizer step. --accum N changes the number of micro-batches.
 */
#include "train.h"

int main(int argc, char **argv) { return dlt_example_train(argc, argv, "grad_accum", 4); }
