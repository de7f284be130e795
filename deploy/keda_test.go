package deploy_test

import (
	encjson "encoding/json"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The KEDA API types the chart renders, as strict local structs: the fields (and JSON
// names) of keda.sh/v1alpha1 ScaledObject, ScaledJob and TriggerAuthentication in KEDA v2.21
// (apis/keda/v1alpha1 of github.com/kedacore/keda/v2), minus status and the fields of
// other authentication providers. KEDA's own module is not imported: its API package
// pulls in controller-runtime and client-go's informers and listers, which made this
// module's test build about 65% larger (930 packages instead of 562) for three structs.

var kedaGV = schema.GroupVersion{Group: "keda.sh", Version: "v1alpha1"}

func addKEDA(s *runtime.Scheme) {
	s.AddKnownTypes(kedaGV, &ScaledObject{}, &ScaledJob{}, &TriggerAuthentication{})
	metav1.AddToGroupVersion(s, kedaGV)
}

type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScaledObjectSpec `json:"spec"`
}

type ScaledObjectSpec struct {
	ScaleTargetRef        *ScaleTarget    `json:"scaleTargetRef"`
	PollingInterval       *int32          `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32          `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32          `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32          `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32          `json:"maxReplicaCount,omitempty"`
	Advanced              *AdvancedConfig `json:"advanced,omitempty"`
	Triggers              []ScaleTriggers `json:"triggers"`
	Fallback              *Fallback       `json:"fallback,omitempty"`
}

type ScaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

type AdvancedConfig struct {
	HorizontalPodAutoscalerConfig *HorizontalPodAutoscalerConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool                           `json:"restoreToOriginalReplicaCount,omitempty"`
}

type HorizontalPodAutoscalerConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
	Name     string                                         `json:"name,omitempty"`
}

type Fallback struct {
	FailureThreshold int32  `json:"failureThreshold"`
	Replicas         int32  `json:"replicas"`
	Behavior         string `json:"behavior,omitempty"`
}

type ScaleTriggers struct {
	Type              string                         `json:"type"`
	Name              string                         `json:"name,omitempty"`
	UseCachedMetrics  bool                           `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string              `json:"metadata"`
	AuthenticationRef *AuthenticationRef             `json:"authenticationRef,omitempty"`
	MetricType        autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
}

type AuthenticationRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

type TriggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TriggerAuthenticationSpec `json:"spec"`
}

type TriggerAuthenticationSpec struct {
	SecretTargetRef []AuthSecretTargetRef `json:"secretTargetRef,omitempty"`
	Env             []AuthEnvironment     `json:"env,omitempty"`
}

type AuthSecretTargetRef struct {
	Parameter string `json:"parameter"`
	Name      string `json:"name"`
	Key       string `json:"key"`
}

type AuthEnvironment struct {
	Parameter     string `json:"parameter"`
	Name          string `json:"name"`
	ContainerName string `json:"containerName,omitempty"`
}

type ScaledJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScaledJobSpec `json:"spec"`
}

type ScaledJobSpec struct {
	JobTargetRef               *batchv1.JobSpec `json:"jobTargetRef"`
	PollingInterval            *int32           `json:"pollingInterval,omitempty"`
	SuccessfulJobsHistoryLimit *int32           `json:"successfulJobsHistoryLimit,omitempty"`
	FailedJobsHistoryLimit     *int32           `json:"failedJobsHistoryLimit,omitempty"`
	EnvSourceContainerName     string           `json:"envSourceContainerName,omitempty"`
	MinReplicaCount            *int32           `json:"minReplicaCount,omitempty"`
	MaxReplicaCount            *int32           `json:"maxReplicaCount,omitempty"`
	Rollout                    *Rollout         `json:"rollout,omitempty"`
	ScalingStrategy            ScalingStrategy  `json:"scalingStrategy,omitempty"`
	Triggers                   []ScaleTriggers  `json:"triggers"`
}

type Rollout struct {
	Strategy          string `json:"strategy,omitempty"`
	PropagationPolicy string `json:"propagationPolicy,omitempty"`
}

type ScalingStrategy struct {
	Strategy                          string   `json:"strategy,omitempty"`
	CustomScalingQueueLengthDeduction *int32   `json:"customScalingQueueLengthDeduction,omitempty"`
	CustomScalingRunningJobPercentage string   `json:"customScalingRunningJobPercentage,omitempty"`
	PendingPodConditions              []string `json:"pendingPodConditions,omitempty"`
	MultipleScalersCalculation        string   `json:"multipleScalersCalculation,omitempty"`
}

func (o *ScaledObject) DeepCopyObject() runtime.Object          { return deepCopy(o) }
func (o *ScaledJob) DeepCopyObject() runtime.Object             { return deepCopy(o) }
func (o *TriggerAuthentication) DeepCopyObject() runtime.Object { return deepCopy(o) }

func deepCopy[T any](o *T) *T {
	b, err := encjson.Marshal(o)
	if err != nil {
		panic(err)
	}
	var c T
	if err := encjson.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return &c
}
