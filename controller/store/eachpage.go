package store

import "context"

// EachPage calls fn for every item list returns, a page of size at a time
// (keyset paging by the UUID uuidOf gives), until a short page or an error
// from list, fn or ctx.
func EachPage[T any](ctx context.Context, size int, list func(Page) ([]*T, error), uuidOf func(*T) string, fn func(*T) error) error {
	p := Page{Limit: size}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		page, err := list(p)
		if err != nil {
			return err
		}
		for _, v := range page {
			if err := fn(v); err != nil {
				return err
			}
		}
		if len(page) < size {
			return nil
		}
		p.Marker = uuidOf(page[len(page)-1])
	}
}
