package interop

// Adapters between the CloudEvents Go SDK's binding package and
// amqp091-go's messages: the SDK ships an AMQP protocol for AMQP 1.0
// only. deliveryMessage reads a delivery as a binding.Message (binary mode
// through binding.MessageMetadataReader, structured mode through the
// SDK's JSON format); publishingWriter is the binding's binary and
// structured writer into an amqp.Publishing. Both follow the AMQP
// binding as the SDK's AMQP 1.0 protocol does, with headers in place of
// application properties and either prefix.

import (
	"bytes"
	"context"
	"io"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/types"
	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	colon      = "cloudEvents:"
	underscore = "cloudEvents_"
)

// deliveryMessage is a binding.Message over an amqp091-go delivery. It can
// be read any number of times.
type deliveryMessage struct {
	d       amqp.Delivery
	prefix  string        // binary mode: the header prefix the delivery uses
	version spec.Version  // binary mode: the spec version its headers name
	format  format.Format // structured mode: the event format of its content type
}

var (
	_ binding.Message               = (*deliveryMessage)(nil)
	_ binding.MessageMetadataReader = (*deliveryMessage)(nil)
)

// newDeliveryMessage tells the delivery's mode as the binding says: by
// its content type, else by a specversion header under either prefix.
func newDeliveryMessage(d amqp.Delivery) *deliveryMessage {
	m := &deliveryMessage{d: d}
	if format.IsFormat(strings.ToLower(d.ContentType)) {
		m.format = format.Lookup(d.ContentType)
		return m
	}
	for _, prefix := range []string{colon, underscore} {
		if sv, ok := d.Headers[prefix+"specversion"].(string); ok {
			m.prefix, m.version = prefix, spec.WithPrefix(prefix).Version(sv)
			return m
		}
	}
	return m
}

func (m *deliveryMessage) ReadEncoding() binding.Encoding {
	switch {
	case m.version != nil:
		return binding.EncodingBinary
	case m.format != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m *deliveryMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.format == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, m.format, bytes.NewReader(m.d.Body))
}

func (m *deliveryMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	if m.version == nil {
		return binding.ErrNotBinary
	}
	if m.d.ContentType != "" {
		if err := w.SetAttribute(m.version.AttributeFromKind(spec.DataContentType), m.d.ContentType); err != nil {
			return err
		}
	}
	for k, v := range m.d.Headers {
		if !strings.HasPrefix(k, m.prefix) {
			continue
		}
		var err error
		if attr := m.version.Attribute(k); attr != nil {
			err = w.SetAttribute(attr, v)
		} else {
			err = w.SetExtension(strings.TrimPrefix(k, m.prefix), v)
		}
		if err != nil {
			return err
		}
	}
	if len(m.d.Body) > 0 {
		return w.SetData(bytes.NewReader(m.d.Body))
	}
	return nil
}

// GetAttribute reads one attribute of a binary-mode delivery.
func (m *deliveryMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	if m.version == nil {
		return nil, nil
	}
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if k == spec.DataContentType {
		if m.d.ContentType == "" {
			return attr, nil
		}
		return attr, m.d.ContentType
	}
	return attr, m.d.Headers[m.prefix+attr.Name()]
}

func (m *deliveryMessage) GetExtension(name string) any { return m.d.Headers[m.prefix+name] }

// Finish does nothing: the tests consume with automatic acknowledgement.
func (m *deliveryMessage) Finish(error) error { return nil }

// publishingWriter writes an SDK message into an amqp.Publishing: its
// content type, headers and body.
type publishingWriter struct {
	p      *amqp.Publishing
	prefix string
	// nativeTime writes the time attribute as an AMQP timestamp, the
	// binding's native form, which AMQP 0-9-1 holds to whole seconds;
	// otherwise as its canonical string.
	nativeTime bool
}

var (
	_ binding.BinaryWriter     = (*publishingWriter)(nil)
	_ binding.StructuredWriter = (*publishingWriter)(nil)
)

func (w *publishingWriter) SetStructuredEvent(_ context.Context, f format.Format, event io.Reader) error {
	body, err := io.ReadAll(event)
	if err != nil {
		return err
	}
	w.p.ContentType, w.p.Body = f.MediaType(), body
	return nil
}

func (w *publishingWriter) Start(context.Context) error {
	w.p.Headers = amqp.Table{}
	return nil
}

func (w *publishingWriter) SetAttribute(attr spec.Attribute, value any) error {
	if attr.Kind() == spec.DataContentType {
		if value == nil {
			w.p.ContentType = ""
			return nil
		}
		s, err := types.Format(value)
		w.p.ContentType = s
		return err
	}
	if attr.Kind() == spec.Time && w.nativeTime && value != nil {
		t, err := types.ToTime(value)
		if err != nil {
			return err
		}
		w.p.Headers[w.prefix+attr.Name()] = t.Truncate(time.Second)
		return nil
	}
	return w.set(attr.Name(), value)
}

func (w *publishingWriter) SetExtension(name string, value any) error { return w.set(name, value) }

// set writes a value in its native AMQP 0-9-1 type where there is one
// (a string, a boolean, a 32-bit integer), else as its canonical string.
func (w *publishingWriter) set(name string, value any) error {
	if value == nil {
		delete(w.p.Headers, w.prefix+name)
		return nil
	}
	v, err := types.Validate(value)
	if err != nil {
		return err
	}
	switch v.(type) {
	case string, bool, int32:
		w.p.Headers[w.prefix+name] = v
		return nil
	}
	s, err := types.Format(v)
	w.p.Headers[w.prefix+name] = s
	return err
}

func (w *publishingWriter) SetData(data io.Reader) error {
	body, err := io.ReadAll(data)
	w.p.Body = body
	return err
}

func (w *publishingWriter) End(context.Context) error { return nil }
