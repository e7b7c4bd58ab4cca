package driver

// #include "trampolines.h"
import "C"

import "unsafe"

// Context is a CUcontext. The zero value is "no context".
type Context struct{ p unsafe.Pointer }

// IsZero reports whether c is the zero Context.
func (c Context) IsZero() bool { return c.p == nil }

// PrimaryCtxRetain retains the device's primary context (the one the CUDA
// runtime and PyTorch use), creating it on first retain. Pair with
// PrimaryCtxRelease.
func (d *Driver) PrimaryCtxRetain(dev Device) (Context, error) {
	var c unsafe.Pointer
	if err := d.check(symPrimaryCtxRetain, C.wc_primary_ctx_retain(d.fn[symPrimaryCtxRetain], &c, C.CUdevice(dev))); err != nil {
		return Context{}, err
	}
	return Context{p: c}, nil
}

// PrimaryCtxRelease releases one retain (cuDevicePrimaryCtxRelease_v2); the
// last release destroys the context and everything allocated in it.
func (d *Driver) PrimaryCtxRelease(dev Device) error {
	return d.check(symPrimaryCtxRelease, C.wc_device_call(d.fn[symPrimaryCtxRelease], C.CUdevice(dev)))
}

// CtxSetCurrent makes c current on the calling OS thread (zero: none).
func (d *Driver) CtxSetCurrent(c Context) error { return d.ptrCall(symCtxSetCurrent, c.p) }

// CtxSynchronize waits for all work of the current context.
func (d *Driver) CtxSynchronize() error {
	return d.check(symCtxSynchronize, C.wc_void_call(d.fn[symCtxSynchronize]))
}
