package client

import (
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// This file holds the client's domain → daemon.v1 conversions (what it
// sends); what it receives is converted in fromproto.go.

// toProto converts a publish table entry for the wire.
func (t TensorSpec) toProto() *daemonv1.TensorSpec {
	return &daemonv1.TensorSpec{Name: t.Name, Dtype: t.DType, Shape: t.Shape, Length: t.Length, Layout: t.Layout.toProto()}
}

// toProto converts a layout for the wire (nil stays nil).
func (l *Layout) toProto() *daemonv1.TensorLayout {
	if l == nil {
		return nil
	}
	return &daemonv1.TensorLayout{Storage: l.Storage, Strides: l.Strides, StorageOffset: l.StorageOffset}
}
