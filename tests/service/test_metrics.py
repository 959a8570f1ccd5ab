from __future__ import annotations

import urllib.request

from broker import free_port

from edge_runtime.service.metrics import serve_metrics


def test_endpoint_serves_the_report_at_scrape_time() -> None:
    report = {
        "pipelines": {
            "door": {
                "frames_in": 120,
                "dropped": 3,
                "results": 117,
                "published": 117,
                "fps_in": 10.0,
                "latency_ms": {"infer": {"p50": 1.5, "p99": 4.0}},
                "runtime": {"backend": "openvino", "device": "CPU", "precision": "fp32"},
            }
        },
        "rollout": {"rollout_id": "r-7", "stage": "rolled_back", "archives_refused": 3},
        "mqtt": {"connected": 1, "spool_depth": 0, "reconnects": 2, "broker": "10.0.0.2:1883", "broker_moves": 1},
        "serving": {"faces": {"request_success": 12, "inference_count": 12, "execution_count": 5,
                              "direct_count": 3, "batch_sizes": {"1": 2, "5": 2}}},
        "serving_refused": {"unknown_model": 4},
    }  # fmt: skip
    port = free_port()
    stop = serve_metrics(lambda: report, "127.0.0.1", port)
    try:
        first = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        report["pipelines"]["door"]["frames_in"] = 130
        second = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        stop()
    assert 'edge_runtime_frames_in_total{pipeline="door"} 120.0' in first
    assert 'edge_runtime_frames_in_total{pipeline="door"} 130.0' in second
    assert 'edge_runtime_stage_latency_ms{pipeline="door",quantile="99",stage="infer"} 4.0' in first
    assert 'edge_runtime_pipeline_info{backend="openvino",device="CPU",pipeline="door",precision="fp32"} 1.0' in first
    assert "edge_runtime_mqtt_reconnects_total 2.0" in first
    assert "edge_runtime_rollout_archives_refused_total 3.0" in first
    assert "edge_runtime_mqtt_connected 1.0" in first
    assert 'edge_runtime_mqtt_broker{broker="10.0.0.2:1883"} 1.0' in first
    assert "edge_runtime_mqtt_broker_moves_total 1.0" in first
    assert 'edge_runtime_serving_inference_count_total{model="faces"} 12.0' in first
    assert 'edge_runtime_serving_execution_count_total{model="faces"} 5.0' in first
    assert 'edge_runtime_serving_direct_count_total{model="faces"} 3.0' in first
    assert 'edge_runtime_serving_batches_total{model="faces",size="5"} 2.0' in first
    assert "edge_runtime_serving_unknown_model_requests_total 4.0" in first
