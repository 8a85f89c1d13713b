/*
 * resnet50_cifar10.c - the seed's mixed-precision training script in C: torchvision's
 * ResNet50 on CIFAR-10, batch 256, SGD lr 0.01, fp16 autocast with a GradScaler, 10 epochs,
 * "Epoch e, Loss: l" every step (10 classes by default; --classes 1000 is the seed's model).
 * Run with --help for the flags; the loop itself is in train.c.
 */
#include "train.h"

int main(int argc, char **argv) { return dlt_example_train(argc, argv, "resnet50_cifar10", 1); }
