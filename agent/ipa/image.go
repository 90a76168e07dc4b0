package ipa

import (
	"fmt"
	"strings"
)

// validateImageInfo is IPA's _validate_image_info, with its messages: the
// image needs an id, a non-empty urls list and a checksum (the legacy
// "checksum" or the os_hash_algo/os_hash_value pair).
func validateImageInfo(info map[string]any) error {
	for _, field := range []string{"id", "urls"} {
		if _, ok := info[field]; !ok {
			return errBadParams("Image is missing '%s' field.", field)
		}
	}
	urls, ok := info["urls"].([]any)
	if !ok || len(urls) == 0 {
		return errBadParams("Image 'urls' must be a list with at least one element.")
	}
	md5, hashed := false, false
	if c, present := info["checksum"]; present && c != nil {
		if s, ok := c.(string); !ok || s == "" {
			return errBadParams("Image 'checksum' must be a non-empty string.")
		}
		md5 = true
	}
	algo, value := info["os_hash_algo"], info["os_hash_value"]
	if nonEmpty(algo) || nonEmpty(value) {
		if s, ok := algo.(string); !ok || s == "" {
			return errBadParams("Image 'os_hash_algo' must be a non-empty string.")
		}
		if s, ok := value.(string); !ok || s == "" {
			return errBadParams("Image 'os_hash_value' must be a non-empty string.")
		}
		hashed = true
	}
	if !md5 && !hashed {
		return errBadParams("Image checksum is not available, either the 'checksum' field or the 'os_hash_algo' and 'os_hash_value' fields pair must be set for image verification.")
	}
	return nil
}

func nonEmpty(v any) bool {
	if v == nil {
		return false
	}
	s, isStr := v.(string)
	return !isStr || s != ""
}

// imageArgs maps a validated image_info onto write_image's arguments.
// What the generic manager cannot do (partition images, proxies,
// checksum files) fails here with a clear error rather than being
// silently skipped.
func imageArgs(info map[string]any, configdrive any) (map[string]any, error) {
	unsupported := func(format string, a ...any) error {
		return &RESTError{Type: "ImageWriteError", Code: 500, Message: "Error writing image to device",
			Details: fmt.Sprintf(format, a...) + " is not supported by the anvil agent"}
	}
	if t, _ := info["image_type"].(string); t == "partition" {
		return nil, unsupported("image %v: partition images (image_type=partition)", info["id"])
	}
	cd, isStr := configdrive.(string)
	if nonEmpty(configdrive) && !isStr {
		// Ironic builds a JSON configdrive into an ISO before sending it.
		return nil, unsupported("a configdrive that is not a string (a base64 gzipped ISO or a URL)")
	}
	if p, ok := info["proxies"].(map[string]any); ok && len(p) > 0 {
		return nil, unsupported("downloading through a proxy (image_http_proxy/image_https_proxy)")
	}
	url, ok := info["urls"].([]any)[0].(string)
	if !ok || url == "" {
		return nil, errBadParams("Image 'urls' must hold URL strings.")
	}
	checksum, err := checksumArg(info)
	if err != nil {
		return nil, err
	}
	args := map[string]any{"image_url": url, "image_checksum": checksum}
	if cd != "" {
		// written after the image by the generic manager's write_image
		// (hardware/imagewrite), as IPA's create_config_drive_partition
		args["configdrive"] = cd
	}
	switch f, _ := info["disk_format"].(string); f {
	case "", "auto":
	case "raw", "qcow2":
		args["image_disk_format"] = f
	default:
		return nil, unsupported("image %v: disk_format %q (raw and qcow2 are)", info["id"], f)
	}
	return args, nil
}

// checksumArg prefers os_hash_algo/os_hash_value, as IPA does. The legacy
// checksum is md5 in IPA 2023.1; newer Ironic also puts other algorithms
// in it, which the digest's length tells apart.
func checksumArg(info map[string]any) (string, error) {
	if algo, _ := info["os_hash_algo"].(string); algo != "" {
		value, _ := info["os_hash_value"].(string)
		algo = strings.ToLower(algo)
		switch algo {
		case "sha256", "sha512", "md5":
			return algo + ":" + strings.ToLower(value), nil
		}
		return "", &RESTError{Type: "ImageChecksumError", Code: 500, Message: "Error verifying image checksum",
			Details: fmt.Sprintf("os_hash_algo %q is not supported (sha256, sha512, md5)", algo)}
	}
	sum, _ := info["checksum"].(string)
	if strings.Contains(sum, "://") {
		return "", &RESTError{Type: "ImageChecksumError", Code: 500, Message: "Error verifying image checksum",
			Details: "checksum files (a URL in 'checksum') are not supported by the anvil agent; set os_hash_algo and os_hash_value"}
	}
	switch len(sum) {
	case 64:
		return "sha256:" + strings.ToLower(sum), nil
	case 128:
		return "sha512:" + strings.ToLower(sum), nil
	}
	return "md5:" + strings.ToLower(sum), nil
}
