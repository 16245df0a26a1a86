package config

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestGCValidAttachments(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantSent  bool
		wantValid int
		wantErr   bool
	}{
		{"absent: unknown, remove nothing", `{"cniVersion":"1.1.0","name":"n"}`, false, 0, false},
		{"null: none valid", `{"cni.dev/valid-attachments":null}`, true, 0, false},
		{"empty list: none valid", `{"cni.dev/valid-attachments":[]}`, true, 0, false},
		{"one valid", `{"cni.dev/valid-attachments":[{"containerID":"c","ifname":"eth0"}]}`, true, 1, false},
		{"older spelling null", `{"cni.dev/attachments":null}`, true, 0, false},
		{"older spelling list", `{"cni.dev/attachments":[{"containerID":"c","ifname":"eth0"}]}`, true, 1, false},
		{"spec key wins", `{"cni.dev/valid-attachments":null,"cni.dev/attachments":[{"containerID":"c","ifname":"eth0"}]}`, true, 0, false},
		{"wrong type", `{"cni.dev/valid-attachments":"c"}`, false, 0, true},
	}
	for _, tc := range tests {
		valid, sent, err := GCValidAttachments([]byte(tc.in))
		if tc.wantErr {
			if e, ok := err.(*types.Error); !ok || e.Code != types.ErrDecodingFailure {
				t.Errorf("%s: want error 6, got %v", tc.name, err)
			}
			continue
		}
		if err != nil || sent != tc.wantSent || len(valid) != tc.wantValid {
			t.Errorf("%s: got valid=%v sent=%v err=%v, want %d valid, sent=%v", tc.name, valid, sent, err, tc.wantValid, tc.wantSent)
		}
	}
}
