// Package data turns datasets on disk (Fashion-MNIST in IDX form) or generated on the fly
// into host batches for the training loop: epoch orders, stride shards and batch plans.
// It holds no device handle and never touches a GPU; only staging copies its batches to
// the device.
package data
